"""The package against a real validator with keepers as processes: every job kind posted from
numpy and lists, each result verified against its root and equal to `compute`'s (the provider's
code path here), the async forms, and bad input refused before anything is paid."""
import asyncio
import re
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest

import compute_market as cm

TEXTS = ["A cat sat on the mat.", "Stocks fell sharply on Monday.",
         "The committee approved the new budget.", "Rain is expected this weekend.",
         "She plays the violin beautifully.", "The server returned an error."]


def test_texts_embedded_by_the_market_equal_the_local_computation(market):
    before = market.balance()
    job = cm.Job.embed(TEXTS)
    assert (job.kind, job.dims[0]) == ("Encoder", len(TEXTS))
    seen = []
    task = market.post(job, reward="1")
    for s in market.watch(task, timeout=300):
        seen.append(s)
    assert seen[-1] == "Accepted", seen
    r = market.result(task)
    # held for the dispute window, then final, still Accepted
    assert market.wait(task, final=True, timeout=300) == "Accepted" and market.final(task)
    local = cm.compute(job, backend="cpu")
    assert r.task == task and r.root == local.root
    assert r.embeddings.dtype == np.int16 and r.embeddings.shape == (len(TEXTS), 384)
    assert np.array_equal(r.embeddings, local.embeddings)
    # the reward left the wallet, in tokens
    assert before - market.balance() == Decimal(1)


def test_rows_and_matrices_posted_side_by_side_with_the_async_forms(market):
    rng = np.random.default_rng(7)
    rows = rng.integers(0, 17, size=(40, 64), dtype=np.int8)
    a = rng.integers(0, 2**31 - 1, size=(64, 64), dtype=np.uint32)
    b = rng.integers(0, 2**31 - 1, size=(64, 64), dtype=np.uint32)

    async def both():
        return await asyncio.gather(market.classify_async(rows, reward="1.5"),
                                    market.matmul_async(a, b, reward=Decimal("0.5")))

    digits, product = asyncio.run(both())
    assert np.array_equal(digits.classes, cm.compute(cm.Job.classify(rows)).classes)
    assert digits.logits.shape == (40, 10)
    want = (a.astype(object) @ b.astype(object)) % (2**31 - 1)
    assert np.array_equal(product.c, want.astype(np.uint32)), "A·B mod p, bit for bit"


def test_a_prompt_completed_by_the_market_equals_the_local_completion(market):
    job = cm.Job.generate(["Name three primary colours."], max_new_tokens=8)
    assert (job.kind, job.dims[0]) == ("Generate", 1)
    r = market.generate(["Name three primary colours."], max_new_tokens=8, reward="1",
                        timeout=300)
    local = cm.compute(job, backend="cpu")
    assert r.root == local.root, "the completion the verifiers accepted is the local one"
    assert r.texts == local.texts and r.texts[0].strip(), r.completions
    assert r.completions[0]["prompt"] == "Name three primary colours."


def test_bad_input_raises_clearly_and_pays_nothing(market, cluster):
    before = market.balance()
    with pytest.raises(cm.InputError, match=r"float64.*int8"):
        market.classify(np.zeros((4, 64)), reward=1)
    with pytest.raises(cm.InputError, match="64 inputs, 63 come in"):
        market.classify(np.zeros((4, 63), dtype=np.int8), reward=1)
    with pytest.raises(cm.InputError, match="columns must equal B's rows"):
        market.matmul(np.ones((2, 3), np.uint32), np.ones((2, 3), np.uint32), reward=1)
    with pytest.raises(cm.InputError, match="outside 0..2147483646"):
        market.matmul(np.full((2, 2), 2**31, np.int64), np.ones((2, 2), np.uint32), reward=1)
    with pytest.raises(cm.InputError, match="text 1 is empty"):
        market.embed(["fine", " "], reward=1)
    with pytest.raises(cm.InputError, match="over the limit of 4"):
        market.embed(TEXTS, reward=1, max_tokens=4)
    with pytest.raises(cm.InputError, match="6 decimals"):
        market.embed(TEXTS, reward="0.0000001")
    # a batch over the job's bounds: more rows than a job may hold
    with pytest.raises(cm.InputError, match="bound"):
        market.classify(np.zeros((1 << 20, 64), dtype=np.int8), reward=1)
    with pytest.raises(cm.InsufficientFunds, match="holds"):
        market.embed(TEXTS, reward=10_000)
    with pytest.raises(cm.KeypairError, match="solana-keygen"):
        cm.Market(cluster["rpc"], "/nonexistent/id.json")
    with pytest.raises(cm.ChainUnavailable, match="cannot reach the cluster"):
        cm.Market("http://127.0.0.1:9", cluster["keypair"])
    with pytest.raises(cm.MarketError, match="no market 77"):
        cm.Market(cluster["rpc"], cluster["keypair"], 77)
    with pytest.raises(cm.InputError, match="not a task address"):
        market.result("nope")
    with pytest.raises(cm.InputError, match="text 1 is int"):
        market.embed(["fine", 3], reward=1)
    with pytest.raises(cm.InputError, match="loopback or private"):
        cm.Market(cluster["rpc"], cluster["keypair"], store=cluster["store"])
    assert market.balance() == before, "nothing was paid"


def test_help_reads_as_a_reference():
    out = subprocess.run([sys.executable, "-c",
                          "import compute_market; help(compute_market.Market)"],
                         capture_output=True, text=True, check=True,
                         env={"PAGER": "cat", "TERM": "dumb"}).stdout
    for method in ("embed", "classify", "matmul", "generate", "post", "watch", "wait",
                   "result", "embed_async"):
        assert re.search(rf"^ \|  (async )?{method}\(", out, re.M), f"{method} documented:\n{out}"
    assert "stake mint" in out and "tokens" in out
