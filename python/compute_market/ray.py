"""Ray and the market, both ways.

Clients: :class:`MarketEmbedder`, a callable class for ``Dataset.map_batches`` that posts each
batch as a market task and returns only verified results, in the batch's order; and
:func:`deployment`, a Ray Serve deployment fronting the market for online requests. Providers:
:func:`serve_provider`, a keeper provider whose tiles fan out over a Ray cluster
(:class:`RayTiles`), one stake and one key for the fleet.

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

from . import FAILED, InputError, Job, Market, MarketError, TaskFailed


class MarketEmbedder:
    """``Dataset.map_batches`` callable class (``batch_format="numpy"``): each batch's
    ``column`` of texts (str) embedded through the market by one task (see the module's
    documentation).

    ``reward`` is per batch (one task), in tokens; ``retries`` bounds the fresh tasks posted
    after one ends Rejected, Undecided or Expired; ``timeout`` (seconds) bounds each task's wait
    (a ``TimeoutError`` leaves the task posted, its reward in escrow until it ends);
    ``allow_private_urls`` for a local cluster. On several machines give ``keypair`` as bytes
    (each actor reads it on its own node) and make ``model`` readable on every node."""

    def __init__(self, rpc: str, keypair: Any, *, store: str, reward: Any, market: int = 1,
                 column: str = "text", model: Optional[str] = None,
                 max_tokens: Optional[int] = None, rows_per_tile: int = 2, retries: int = 2,
                 timeout: float = 600.0, allow_private_urls: bool = False):
        if retries < 0:
            raise InputError(f"retries {retries}: give 0 or more")
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


def _tiles_on_worker(job: bytes, bases, indices, allow_private_urls: bool, version: str):
    """A chunk of tiles computed on the Ray worker this runs on: ``(node id, tiles)`` (a worker
    with another build of the package refuses)."""
    from . import _native

    return _node_id(), _native.provider_tiles(job, bases, indices, allow_private_urls, version)


class RayTiles:
    """The tile function of a Ray-backed provider (:func:`serve_provider`): each task's tiles
    split into contiguous chunks, ``chunks_per_node`` for every live Ray node with a CPU (read
    at each task, so nodes the autoscaler adds are used from the next task on, without a
    restart), each chunk a Ray task pinned softly to its node. A chunk whose worker or node is
    lost is retried by Ray (``max_retries``) on another node; whichever worker runs a tile, it
    runs the same Rust kernels through this package, so the tiles are bit-identical.

    ``history`` keeps, per task, the nodes chunks were pinned to and the nodes that ran them.
    """

    def __init__(self, *, chunks_per_node: int = 2, max_retries: int = 3,
                 num_cpus: float = 1.0, num_gpus: float = 0.0, timeout: float = 600.0,
                 allow_private_urls: bool = False):
        import collections

        import ray

        # a task that asks for no GPU sees none (Ray hides them): num_gpus=1 on GPU nodes
        self._remote = ray.remote(max_retries=max_retries, num_cpus=num_cpus,
                                  num_gpus=num_gpus)(_tiles_on_worker)
        self.chunks_per_node = max(1, chunks_per_node)
        self.allow_private_urls = allow_private_urls
        self.timeout = timeout
        self.history = collections.deque(maxlen=1000)

    def nodes(self):
        """The live Ray nodes with a CPU, by id."""
        import ray

        return [n["NodeID"] for n in ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]

    def dispatched(self, kind: str, refs, pinned) -> None:
        """Called once a job's chunks are submitted, with the job's kind (a hook for tests and
        metrics; the keeper also runs small synthetic jobs at start to measure its speed)."""

    def __call__(self, job: bytes, bases, indices):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from . import _native

        kind, dims, _ = _native.job_info(job)
        if not indices:
            return []
        started = time.time()
        nodes = self.nodes()
        if not nodes:
            raise RuntimeError("the Ray cluster has no live node with a CPU")
        n = min(len(indices), len(nodes) * self.chunks_per_node)
        size = -(-len(indices) // n)
        chunks = [list(indices[i:i + size]) for i in range(0, len(indices), size)]
        pinned = [nodes[i % len(nodes)] for i in range(len(chunks))]
        refs = [
            self._remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=True)
            ).remote(job, list(bases), chunk, self.allow_private_urls, _native.__version__)
            for chunk, node in zip(chunks, pinned)
        ]
        self.dispatched(kind, refs, pinned)
        out, ran = [], []
        try:
            done = ray.get(refs, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            for r in refs:
                ray.cancel(r, force=True)
            raise
        for node, tiles in done:
            ran.append(node)
            out.extend(tiles)
        self.history.append(dict(kind=kind, dims=list(dims), tiles=len(indices), pinned=pinned,
                                 ran=ran,
                                 seconds=round(time.time() - started, 3)))
        return out


def serve_provider(rpc: str, keypair: str, *, db: str, listen: str, market: int = 1,
                   public_url: Optional[str] = None, max_active: Optional[int] = None,
                   tiles: Optional[RayTiles] = None, allow_private_urls: bool = False,
                   poll_ms: int = 400, drain_timeout_s: int = 600) -> None:
    """Runs a keeper provider whose tiles are computed on the Ray cluster this process is
    connected to (``ray.init(address=...)`` first): one key and one stake for the whole
    cluster. It claims, fetches inputs, commits the root, serves results and answers disputes as
    ``keeper run --provider`` does (its store a redb file at ``store``, its HTTP server on
    ``listen``, which the workers fetch the inputs from); only the tiles go to Ray
    (:class:`RayTiles`). ``max_active`` (tasks held at once) defaults to the cluster's CPUs.
    On SIGTERM or Ctrl-C it drains (docs/PROTOCOL.md §3.8): it claims nothing new, finishes,
    serves and defends what it holds, then returns; a second signal, or ``drain_timeout_s``
    seconds, makes it return after the pass in hand (0: at once)."""
    import ray

    from . import _native

    if tiles is None:
        tiles = RayTiles(allow_private_urls=allow_private_urls)
    else:
        tiles.allow_private_urls = tiles.allow_private_urls or allow_private_urls
    if max_active is None:
        max_active = max(1, int(ray.cluster_resources().get("CPU", 1)))
    _native.run_provider(rpc, keypair, tiles, db, listen, market, public_url, max_active,
                         poll_ms, allow_private_urls, drain_timeout_s)


class MarketEndpoint:
    """The body of a Ray Serve deployment fronting the market (:func:`deployment`): ``POST``
    a JSON object ``{"texts": [...]}`` for embeddings or ``{"prompts": [...]}`` (with any of
    :meth:`compute_market.Job.generate`'s options) for completions; the answer holds the
    verified result, the ``task`` that computed it and the ``root`` it was checked against.
    Bad input answers 400 with the message, a task that failed or a cluster that does not
    answer 502; every request is its own paid task of ``reward`` tokens."""

    def __init__(self, rpc: str, keypair: Any, *, store: str, reward: Any, market: int = 1,
                 allow_private_urls: bool = False, timeout: float = 600.0):
        self.market = Market(rpc, keypair, market, store=store,
                             allow_private_urls=allow_private_urls)
        self.reward, self.timeout = reward, timeout
        self.market.base_units(reward)

    async def __call__(self, request) -> Any:
        from starlette.responses import JSONResponse

        try:
            body = await request.json()
        except Exception:
            return JSONResponse({"error": "the body is not JSON: send {\"texts\": [...]} or "
                                          "{\"prompts\": [...]}"}, status_code=400)
        try:
            if isinstance(body, dict) and "texts" in body:
                r = await self.market.embed_async(body["texts"], reward=self.reward,
                                                  timeout=self.timeout)
                return {"task": r.task, "root": r.root, "embeddings": r.embeddings.tolist()}
            if isinstance(body, dict) and "prompts" in body:
                opts = {k: v for k, v in body.items() if k != "prompts"}
                r = await self.market.generate_async(body["prompts"], reward=self.reward,
                                                     timeout=self.timeout, **opts)
                return {"task": r.task, "root": r.root, "texts": r.texts,
                        "completions": r.completions}
            return JSONResponse({"error": "send {\"texts\": [...]} or {\"prompts\": [...]}"},
                                status_code=400)
        except (InputError, TypeError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except MarketError as e:
            return JSONResponse({"error": str(e)}, status_code=502)
        except Exception as e:  # anything else still answers JSON, naming what went wrong
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)


def deployment(**options: Any):
    """:class:`MarketEndpoint` as a Ray Serve deployment (``options`` are
    ``serve.deployment``'s: ``num_replicas``, ``ray_actor_options``, ...)::

        from ray import serve
        from compute_market.ray import deployment

        serve.run(deployment(num_replicas=2).bind(RPC, KEYPAIR, store=STORE, reward="1"),
                  route_prefix="/market")
    """
    from ray import serve

    return serve.deployment(**options)(MarketEndpoint)
