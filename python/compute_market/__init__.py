"""Compute Market from Python: post AI and compute jobs to a verifiable GPU market on Solana
and get back results checked against the root its verifiers accepted on chain.

Quick start::

    import compute_market as cm

    market = cm.Market("http://127.0.0.1:18899", "~/cm/client.json",   # scripts/app ~/cm
                       store="http://127.0.0.1:19299", allow_private_urls=True)
    result = market.embed(["a cat sat on the mat", "stocks fell sharply"], reward="1")
    result.embeddings          # numpy int16 [2, 384], every tile checked against result.root

Every ``timeout`` and ``interval`` is in seconds; every ``reward`` in tokens of the market's
stake mint, per task.

The calls are the keeper library's own (a native module built by maturin over Rust): a job is
checked here as providers and verifiers will check it before anything is uploaded or paid, and
``compute(job)`` runs it on this machine through the provider's code path. Every call that
waits on the chain has an ``async`` form (``embed_async``, ``wait_async``, ...). Errors are the
exceptions of :mod:`compute_market.errors`. Ray users: :mod:`compute_market.ray`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
import urllib.parse
import warnings as _warnings
from decimal import ROUND_DOWN, Decimal, InvalidOperation, localcontext
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _native
from .errors import (
    ChainUnavailable,
    InputError,
    InsufficientFunds,
    KeypairError,
    MarketError,
    NoProvider,
    NotReady,
    ResultUnavailable,
    TaskFailed,
)

__version__ = _native.__version__
__all__ = [
    "Market",
    "Job",
    "Result",
    "compute",
    "MarketError",
    "InputError",
    "KeypairError",
    "ChainUnavailable",
    "InsufficientFunds",
    "NoProvider",
    "NotReady",
    "TaskFailed",
    "ResultUnavailable",
]

#: Statuses after which a task changes no more, beside ``Accepted`` (a verified result).
FAILED = ("Rejected", "Undecided", "Cancelled", "Expired")
Amount = Union[int, str, Decimal]


def _int_matrix(x: Any, name: str, dtype: Any, lo: int, hi: int, hint: str) -> np.ndarray:
    """``x`` as a C-contiguous 2-D array of ``dtype``, refusing floats, other ranks and values
    outside ``lo..hi`` by name."""
    a = np.asarray(x)
    if a.ndim != 2:
        raise InputError(f"{name} has shape {a.shape}: it must be a 2-D matrix [rows, columns]")
    if not np.issubdtype(a.dtype, np.integer):
        raise InputError(f"{name} is {a.dtype}: {hint} ({name}.astype(np.{np.dtype(dtype).name}))")
    if a.size and (a.min() < lo or a.max() > hi):
        raise InputError(f"{name} holds values outside {lo}..{hi}: {hint}")
    return np.ascontiguousarray(a, dtype=dtype)


class Job:
    """A job, read and checked as providers and verifiers will check it (shape, dtype, the
    model's bounds, every text tokenized within its limit), ready to :meth:`Market.post` or to
    :func:`compute` here. Make one with :meth:`embed`, :meth:`classify`, :meth:`matmul` or
    :meth:`generate`; ``kind``, ``dims``, ``tiles``, ``work`` (what a reward is priced by) and
    ``warnings`` describe it."""

    def __init__(self, native: "_native.Job"):
        self._native = native

    @staticmethod
    def embed(texts: Sequence[str], *, model: Optional[str] = None,
              max_tokens: Optional[int] = None, rows_per_tile: int = 2) -> "Job":
        """Sentence embeddings of ``texts`` (one line each) by an integer MiniLM (default: the
        one ``scripts/minilm-model`` makes, in ``~/.cache/compute-market/models/``; ``model=``
        names another file). ``max_tokens`` bounds a text, [CLS] and [SEP] included (default:
        the longest text's, the tightest price: work is priced at the bound). A verifier
        re-executes a sample of tiles of ``rows_per_tile`` texts each: smaller tiles, a smaller
        fraction checked per verifier."""
        if isinstance(texts, str):
            raise InputError("texts is one str: give a list of texts (e.g. [text])")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputError(f"text {i} is {type(t).__name__}, not str: every text is a str")
        return Job(_native.embed_job(texts, model, max_tokens, rows_per_tile))

    @staticmethod
    def classify(rows: Any, *, model: Optional[str] = None, rows_per_tile: int = 8) -> "Job":
        """Classes of ``rows`` (an int8 matrix [rows, features]) by an integer MLP (default: the
        8×8 digits model, features 0..16)."""
        a = _int_matrix(rows, "rows", np.int8, -128, 127, "an Mlp's features are int8")
        return Job(_native.classify_job(a.tobytes(), a.shape, model, rows_per_tile))

    @staticmethod
    def matmul(a: Any, b: Any) -> "Job":
        """The product A·B mod 2^31 − 1 of two uint32 matrices (every element below
        2^31 − 1), verified by Freivalds' check."""
        hint = "a MatMulModP matrix is uint32, every element below 2^31 − 1"
        a = _int_matrix(a, "a", np.uint32, 0, 2**31 - 2, hint)
        b = _int_matrix(b, "b", np.uint32, 0, 2**31 - 2, hint)
        return Job(_native.matmul_job(a.tobytes(), a.shape, b.tobytes(), b.shape))

    @staticmethod
    def generate(prompts: Sequence[str], *, model: Optional[str] = None,
                 max_new_tokens: int = 128, max_tokens: Optional[int] = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 rows_per_tile: int = 1) -> "Job":
        """Completions of ``prompts`` (chat turns) by an integer decoder (default: SmolLM2-135M
        -Instruct as ``scripts/smollm2-model`` makes it): greedy at ``temperature`` 0, else
        sampled by the seeded rule every verifier replays."""
        if isinstance(prompts, str):
            raise InputError("prompts is one str: give a list of prompts (e.g. [prompt])")
        return Job(_native.generate_job(list(prompts), model, max_new_tokens, max_tokens,
                                        float(temperature), top_k, float(top_p), seed,
                                        rows_per_tile))

    kind = property(lambda self: self._native.kind, doc="Encoder, Mlp, MatMulModP or Generate.")
    dims = property(lambda self: self._native.dims, doc="Its three dimensions (PROTOCOL §5).")
    tiles = property(lambda self: self._native.tiles, doc="Output tiles.")
    work = property(lambda self: self._native.work, doc="Work units, what rewards are priced by.")
    warnings = property(lambda self: self._native.warnings,
                        doc="What to know before paying (inputs outside what a model learned).")

    def __repr__(self) -> str:
        return repr(self._native)


class Result:
    """A verified result: ``arrays`` (numpy, by tensor name, as ``keeper task result`` writes
    them), ``root`` (the Merkle root every tile was checked against, hex), ``task`` (None for
    :func:`compute`), and per kind ``embeddings``, ``classes``/``logits``, ``c`` or
    ``completions``."""

    def __init__(self, d: Dict[str, Any]):
        self.task: Optional[str] = d["task"]
        self.root: str = d["root"]
        self.arrays: Dict[str, np.ndarray] = {
            name: np.frombuffer(data, dtype=dtype).reshape(shape)
            for name, dtype, shape, data in d["tensors"]
        }
        self.completions: List[Dict[str, Any]] = list(d.get("completions") or [])
        #: the keepers that served the tiles (None for :func:`compute`)
        self.source: Optional[str] = d.get("source")
        #: seconds this machine took (:func:`compute` only)
        self.seconds: Optional[float] = d.get("seconds")

    def _get(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            raise AttributeError(f"this result holds {sorted(self.arrays)}, not {name!r}")
        return self.arrays[name]

    embeddings = property(lambda self: self._get("embedding"),
                          doc="An Encoder's integer embeddings, int16 [texts, width]: "
                              "vectors in fixed point; cosine similarity is "
                              "their dot product over the product of their norms, as for "
                              "floats (scale cancels).")
    classes = property(lambda self: self._get("class"), doc="An Mlp's classes, uint32 [rows].")
    logits = property(lambda self: self._get("logits"), doc="An Mlp's logits, int32 [rows, classes].")
    c = property(lambda self: self._get("C"), doc="A MatMulModP's product, uint32 [m, n].")

    @property
    def texts(self) -> List[str]:
        """A Generate job's completions' texts, in prompt order."""
        return [c["text"] for c in self.completions]

    def __repr__(self) -> str:
        shapes = {k: v.shape for k, v in self.arrays.items()}
        return f"Result(task={self.task!r}, root={self.root[:16]}…, arrays={shapes})"


def compute(job: Job, backend: str = "auto") -> Result:
    """Runs ``job`` on this machine through the provider's code path (``keeper compute``): its
    inputs checked as a provider checks them, every tile computed (``backend``: "auto", "cpu"
    or "cuda") and committed into the root a provider would submit. Nothing is posted or
    paid: the market's result for the same job has the same root, bit for bit."""
    return Result(_native.compute(job._native, backend))


def _private(url: str) -> bool:
    """Whether ``url``'s host is loopback or private (a local cluster's)."""
    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


class Market:
    """One market of a Compute Market cluster, signing as one keypair.

    ``Market(rpc, keypair, market=1, *, store=None, allow_private_urls=False)``: ``rpc`` is the
    cluster's RPC URL, ``keypair`` a keypair file's path (or its 64 bytes) whose stake-token
    account pays rewards, ``store`` the content store a job's inputs are uploaded to (a ``keeper
    serve``), ``allow_private_urls`` lets results come from loopback and private addresses (a
    local cluster). The constructor checks that the cluster answers and the market exists.

    Amounts (``reward``) are in tokens of the market's stake mint ("1.5", 2, Decimal): converted
    exactly with the mint's decimals read from chain.
    """

    def __init__(self, rpc: str, keypair: Union[str, bytes, Sequence[int]], market: int = 1, *,
                 store: Optional[str] = None, allow_private_urls: bool = False):
        if isinstance(keypair, str):
            import os
            keypair = os.path.expanduser(keypair)
        else:
            keypair = list(bytes(keypair))
        if store is not None and not allow_private_urls and _private(store):
            raise InputError(f"store {store!r} is a loopback or private address, which providers "
                             "elsewhere cannot fetch from: give a public store, or "
                             "allow_private_urls=True on a local cluster")
        self._m = _native.NativeMarket(rpc, keypair, market, store, allow_private_urls)
        self._decimals: Optional[int] = None
        self._ids: Dict[str, int] = {}

    address = property(lambda self: self._m.address, doc="The signer's address (base58).")
    market = property(lambda self: self._m.market, doc="The market id.")
    rpc = property(lambda self: self._m.rpc, doc="The RPC URL.")

    @property
    def decimals(self) -> int:
        """The stake token's decimals (read from its mint once)."""
        if self._decimals is None:
            self._decimals = self._m.token()[0]
        return self._decimals

    def balance(self) -> Decimal:
        """The signer's stake-token balance, in tokens."""
        d, base = self._m.token()
        return Decimal(base).scaleb(-d)

    def base_units(self, amount: Amount) -> int:
        """``amount`` tokens in the mint's base units, exactly (more decimals than the mint's
        is an :class:`InputError`)."""
        if isinstance(amount, float):
            amount = repr(amount)  # the digits the user typed, not the binary fraction
        with localcontext() as ctx:
            ctx.prec = 80  # exact for any u64 of base units at any decimals
            try:
                x = Decimal(str(amount))
            except InvalidOperation:
                raise InputError(f"reward {amount!r} is not a number of tokens (e.g. \"1.5\")") from None
            if not x.is_finite() or x <= 0:
                raise InputError(f"reward {amount!r}: give a positive number of tokens")
            units = x.scaleb(self.decimals)
            if units != units.to_integral_value():
                down = x.quantize(Decimal(1).scaleb(-self.decimals), rounding=ROUND_DOWN)
                smallest = Decimal(1).scaleb(-self.decimals)
                raise InputError(f"reward {amount}: the token has {self.decimals} decimals; "
                                 f"give {down if down > 0 else smallest} (the smallest amount is "
                                 f"{smallest})")
            if units >= 2**64:
                raise InputError(f"reward {amount} is more than a u64 of base units")
            return int(units)

    def post(self, job: Job, *, reward: Amount, quorum: int = 0, samples: int = 0,
             region: int = 0, anyway: bool = False) -> str:
        """Posts ``job`` with ``reward`` tokens in escrow and returns the task's address: its
        inputs go to the store first (what the store holds is not sent again), after asking the
        market's providers whether any would take it (``anyway`` posts regardless).
        ``quorum`` (verifiers seated) and ``samples`` (tiles each re-executes) are 0 for the
        market's; ``region`` (continent·100 + zone) ranks nearer providers first, 0 for any.

        Raises :class:`InsufficientFunds`, :class:`NoProvider`, :class:`InputError`,
        :class:`ChainUnavailable`; nothing is paid unless it returns."""
        for w in job.warnings:
            _warnings.warn(w, stacklevel=2)
        units = self.base_units(reward)
        decimals, held = self._m.token()
        if held < units:
            raise InsufficientFunds(
                f"the wallet {self.address} holds {Decimal(held).scaleb(-decimals)} tokens and "
                f"the reward is {reward}: fund it (on a local network the admin runs `keeper "
                f"fund {self.address} <amount>`)")
        task, task_id = self._m.post(job._native, units, quorum, samples, region, anyway)
        self._ids[task] = task_id
        return task

    def status(self, task: str) -> str:
        """The task's status: Open, Claimed, Verifying, Accepted, Rejected, Undecided,
        Cancelled or Expired (a closed task's from its history). While the task's account is
        open an Accepted or Rejected verdict is held for its dispute window and may still be
        overturned (:meth:`final`)."""
        return self._m.status(task)[0]

    def final(self, task: str) -> bool:
        """Whether the task's outcome is final: its account closed after the dispute window,
        its money moved."""
        return not self._m.status(task)[1]

    def watch(self, task: str, *, timeout: float = 600.0, interval: float = 0.5,
              final: bool = False) -> Iterator[str]:
        """Yields the task's status each time it changes, ending after ``Accepted`` (unless
        ``final``: then after the dispute window, when the verdict is final) or once a failed
        task's outcome is final. A cluster that stops answering for a while is waited for until
        ``timeout`` (then ``TimeoutError``)."""
        last, end = None, time.monotonic() + timeout
        while True:
            try:
                s, open_ = self._m.status(task)
            except ChainUnavailable:
                if time.monotonic() > end:
                    raise
                time.sleep(min(5.0, interval * 4))
                continue
            if s != last:
                yield s
                last = s
            if (s == "Accepted" and not final) or not open_:
                return
            if time.monotonic() > end:
                raise TimeoutError(f"task {task} is still {s} after {timeout:.0f} s")
            time.sleep(interval)

    def wait(self, task: str, *, timeout: float = 600.0, final: bool = False) -> str:
        """Waits until the task is Accepted and returns "Accepted"; raises :class:`TaskFailed`
        once it has ended otherwise for good.

        Accepted means the majority of its seated verifiers checked it and the result matches
        the root on chain; the verdict is then held for the market's dispute window, in which
        one honest party can still overturn it (the client is then refunded). ``final=True``
        waits for the window to close. A Rejected verdict is waited out to its end, since a
        dispute may restore it: a failed task is never reported while it could still turn."""
        s = None
        for s in self.watch(task, timeout=timeout, final=final):
            pass
        if s != "Accepted":
            raise TaskFailed(f"task {task} ended {s}: {_native.NativeMarket.meaning(s)}",
                             status=s, task=task)
        return s

    def id_of(self, task: str) -> Optional[int]:
        """The numeric id of a task this object posted (what :meth:`cancel` also takes)."""
        return self._ids.get(task)

    def result(self, task: str) -> Result:
        """An Accepted task's result, fetched from its provider (then the verifiers that keep
        it), every tile checked against the root on chain. Raises :class:`NotReady` before the
        verdict, :class:`TaskFailed` for a task that failed, :class:`ResultUnavailable` when no
        keeper serves it (``keeper task result`` can then challenge its availability)."""
        return Result(self._m.result(task))

    def run(self, job: Job, *, reward: Amount, timeout: float = 600.0, **terms: Any) -> Result:
        """Posts ``job``, waits for its verdict (up to ``timeout`` seconds; ``TimeoutError``
        leaves the task posted, its reward in escrow until it ends) and returns its verified
        result. ``terms`` are :meth:`post`'s; raises what :meth:`post`, :meth:`wait` and
        :meth:`result` raise."""
        task = self.post(job, reward=reward, **terms)
        self.wait(task, timeout=timeout)
        return self.result(task)

    def embed(self, texts: Sequence[str], *, reward: Amount, model: Optional[str] = None,
              max_tokens: Optional[int] = None, rows_per_tile: int = 2, **terms: Any) -> Result:
        """Embeds ``texts`` through the market (see :meth:`Job.embed`): ``.embeddings``."""
        return self.run(Job.embed(texts, model=model, max_tokens=max_tokens,
                                  rows_per_tile=rows_per_tile), reward=reward, **terms)

    def classify(self, rows: Any, *, reward: Amount, model: Optional[str] = None,
                 rows_per_tile: int = 8, **terms: Any) -> Result:
        """Classifies ``rows`` through the market (see :meth:`Job.classify`): ``.classes``."""
        return self.run(Job.classify(rows, model=model, rows_per_tile=rows_per_tile),
                        reward=reward, **terms)

    def matmul(self, a: Any, b: Any, *, reward: Amount, **terms: Any) -> Result:
        """A·B mod 2^31 − 1 through the market (see :meth:`Job.matmul`): ``.c``."""
        return self.run(Job.matmul(a, b), reward=reward, **terms)

    def generate(self, prompts: Sequence[str], *, reward: Amount, **options: Any) -> Result:
        """Completes ``prompts`` through the market (see :meth:`Job.generate` for the options;
        the others are the post's terms): ``.texts``, ``.completions``."""
        job_keys = {"model", "max_new_tokens", "max_tokens", "temperature", "top_k", "top_p",
                    "seed", "rows_per_tile"}
        job = Job.generate(prompts, **{k: v for k, v in options.items() if k in job_keys})
        return self.run(job, reward=reward,
                        **{k: v for k, v in options.items() if k not in job_keys})

    def cancel(self, task: Union[str, int]) -> None:
        """Cancels an Open task of this keypair (its address as :meth:`post` returned it, or its
        numeric id); the reward is refunded."""
        if isinstance(task, str):
            if task not in self._ids:
                raise InputError(f"task {task} was not posted by this Market object: give its "
                                 "numeric id")
            task = self._ids[task]
        self._m.cancel(task)

    # async forms: the same calls on a worker thread (the native calls release the GIL)
    async def post_async(self, job: Job, **kw: Any) -> str:
        """:meth:`post`, awaitable."""
        return await asyncio.to_thread(self.post, job, **kw)

    async def wait_async(self, task: str, **kw: Any) -> str:
        """:meth:`wait`, awaitable."""
        return await asyncio.to_thread(self.wait, task, **kw)

    async def result_async(self, task: str) -> Result:
        """:meth:`result`, awaitable."""
        return await asyncio.to_thread(self.result, task)

    async def run_async(self, job: Job, **kw: Any) -> Result:
        """:meth:`run`, awaitable: many jobs in flight with ``asyncio.gather``."""
        return await asyncio.to_thread(self.run, job, **kw)

    async def embed_async(self, texts: Sequence[str], **kw: Any) -> Result:
        """:meth:`embed`, awaitable."""
        return await asyncio.to_thread(self.embed, texts, **kw)

    async def classify_async(self, rows: Any, **kw: Any) -> Result:
        """:meth:`classify`, awaitable."""
        return await asyncio.to_thread(self.classify, rows, **kw)

    async def matmul_async(self, a: Any, b: Any, **kw: Any) -> Result:
        """:meth:`matmul`, awaitable."""
        return await asyncio.to_thread(self.matmul, a, b, **kw)

    async def generate_async(self, prompts: Sequence[str], **kw: Any) -> Result:
        """:meth:`generate`, awaitable."""
        return await asyncio.to_thread(self.generate, prompts, **kw)

    def __repr__(self) -> str:
        return f"Market(rpc={self.rpc!r}, market={self.market}, address={self.address!r})"
