"""MarketEmbedder's retry rule, on a stand-in market (no chain, no Ray): a task that ends
Rejected, Undecided or Expired is posted again as a fresh task up to `retries` times, then
TaskFailed is raised; a Cancelled task is not retried; rows come back in the batch's order."""
from decimal import Decimal

import numpy as np
import pytest

import compute_market as cm
from compute_market.ray import MarketEmbedder


class StandIn:
    """Ends each posted task as the next of `outcomes` says."""

    def __init__(self, outcomes):
        self.outcomes, self.posted = list(outcomes), []

    def base_units(self, amount):
        return int(Decimal(str(amount)) * 10**6)

    def post(self, job, reward):
        self.posted.append(job)
        return f"task{len(self.posted)}"

    def wait(self, task, timeout):
        s = self.outcomes.pop(0)
        if s != "Accepted":
            raise cm.TaskFailed(f"{task} ended {s}", status=s, task=task)

    def result(self, task):
        return cm.compute(self.posted[-1], backend="cpu")


def embedder(outcomes, retries=2):
    e = MarketEmbedder.__new__(MarketEmbedder)
    e.market, e.reward, e.column = StandIn(outcomes), Decimal(1), "text"
    e.model, e.max_tokens, e.rows_per_tile, e.retries, e.timeout = None, None, 2, retries, 60
    e.posted, e.retried, e.paid = 0, 0, Decimal(0)
    return e


BATCH = {"text": np.array(["A cat sat on the mat.", "Stocks fell sharply."])}


def test_a_rejected_and_an_expired_task_are_posted_again():
    e = embedder(["Rejected", "Expired", "Accepted"])
    out = e(BATCH)
    want = cm.compute(cm.Job.embed(list(BATCH["text"])), backend="cpu").embeddings
    assert np.array_equal(out["embedding"], want), "the verified rows, in the batch's order"
    assert (e.posted, e.retried, e.paid) == (3, 2, Decimal(1)), "paid once, for the accepted task"
    assert list(out["task"]) == ["task3", "task3"]


def test_past_the_bound_it_raises():
    e = embedder(["Undecided", "Rejected", "Rejected"], retries=2)
    with pytest.raises(cm.TaskFailed) as x:
        e(BATCH)
    assert x.value.status == "Rejected" and e.posted == 3


def test_a_cancelled_task_is_not_retried():
    e = embedder(["Cancelled", "Accepted"])
    with pytest.raises(cm.TaskFailed):
        e(BATCH)
    assert e.posted == 1
