"""Ray Data through the market: a callable class for ``Dataset.map_batches`` that posts each
batch as a market task and returns only verified results, in the batch's order.

::

    import ray
    from compute_market.ray import MarketEmbedder

    ds = ray.data.from_items([{"text": t} for t in texts])
    out = ds.map_batches(
        MarketEmbedder,
        fn_constructor_kwargs=dict(rpc=RPC, keypair=KEYPAIR, store=STORE, reward="1"),
        batch_size=50,
        concurrency=4,        # an actor pool of 4: four tasks in flight
        num_cpus=0.25,        # an actor mostly waits on the chain
        batch_format="numpy",
    )

Each actor holds one :class:`compute_market.Market` and keeps one task in flight, so
``concurrency=N`` keeps N tasks in flight. A task that ends Rejected, Undecided or Expired (its
reward refunded) is posted again as a fresh task, up to ``retries`` times, then
:class:`compute_market.TaskFailed` is raised. The output adds ``embedding`` (int16 rows),
``task`` (the task that computed the row), ``root`` (the root it was checked against) and
``cost`` (the row's share of the reward paid, in tokens: ``ds.sum("cost")`` is what the run
cost), and ``started_at``, ``finished_at`` and ``node`` (when and on which Ray node its task
was posted and verified).
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, Dict, Optional

import numpy as np

from . import FAILED, Job, Market, TaskFailed


class MarketEmbedder:
    """``Dataset.map_batches`` callable class: each batch's ``column`` of texts embedded through
    the market by one task (see the module's documentation)."""

    def __init__(self, rpc: str, keypair: Any, *, store: str, reward: Any, market: int = 1,
                 column: str = "text", model: Optional[str] = None,
                 max_tokens: Optional[int] = None, rows_per_tile: int = 2, retries: int = 2,
                 timeout: float = 600.0, allow_private_urls: bool = False):
        self.market = Market(rpc, keypair, market, store=store,
                             allow_private_urls=allow_private_urls)
        self.reward = Decimal(str(reward))
        self.market.base_units(self.reward)  # refused here, not in the first batch
        self.column, self.model, self.max_tokens = column, model, max_tokens
        self.rows_per_tile, self.retries, self.timeout = rows_per_tile, retries, timeout
        #: tasks posted, tasks retried, tokens paid (this actor's)
        self.posted, self.retried, self.paid = 0, 0, Decimal(0)

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        texts = [str(t) for t in batch[self.column]]
        job = Job.embed(texts, model=self.model, max_tokens=self.max_tokens,
                        rows_per_tile=self.rows_per_tile)
        started = time.time()
        for attempt in range(self.retries + 1):
            task = self.market.post(job, reward=self.reward)
            self.posted += 1
            try:
                self.market.wait(task, timeout=self.timeout)
            except TaskFailed as e:
                if e.status in FAILED and e.status != "Cancelled" and attempt < self.retries:
                    self.retried += 1
                    continue
                raise
            result = self.market.result(task)
            break
        self.paid += self.reward
        n = len(texts)
        out = dict(batch)
        out["embedding"] = result.embeddings
        out["task"] = np.array([task] * n)
        out["root"] = np.array([result.root] * n)
        out["cost"] = np.full(n, float(self.reward) / n)
        out["started_at"] = np.full(n, started)
        out["finished_at"] = np.full(n, time.time())
        out["node"] = np.array([_node_id()] * n)
        return out


def _node_id() -> str:
    """The Ray node this runs on ("" outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:
        return ""
