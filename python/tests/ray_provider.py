"""A provider backed by a three-node Ray cluster (a head and two worker nodes, each its own
raylet process), run by tests/tests/python.rs against a real validator:

    python ray_provider.py RPC PROVIDER_KEYPAIR STORE.redb LISTEN STATS.json

While the first task's tiles are out, the worker node holding chunks of it is killed (Ray
retries them elsewhere); once they are back a new node joins, as an autoscaler would add one,
and the next task's tiles use it without a restart. STATS.json is rewritten after each task:
the chunks' pinned and running nodes, the killed node, the added one."""
import json
import queue
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

from compute_market.ray import RayTiles, serve_provider

rpc, keypair, store, listen, stats_path = sys.argv[1:6]
cluster = Cluster(initialize_head=True, head_node_args=dict(
    num_cpus=1, object_store_memory=150 << 20, include_dashboard=False))
workers = [cluster.add_node(num_cpus=1, object_store_memory=150 << 20) for _ in range(2)]
ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
stats = dict(ready=False, killed=None, added=None, tasks=[])


def write():
    with open(stats_path + ".part", "w") as f:
        json.dump(stats, f)
    import os
    os.replace(stats_path + ".part", stats_path)


victim = workers[0].node_id


def tiles_slow_on_victim(job, bases, indices, allow_private_urls, version):
    """The library's worker function, but a market task's chunks on the victim node dwell 5 s
    first, so that the node dies while they run."""
    from compute_market import _native
    from compute_market.ray import _node_id, _tiles_on_worker

    if _node_id() == victim and _native.job_info(job)[0] == "Encoder":
        time.sleep(5)
    return _tiles_on_worker(job, bases, indices, allow_private_urls, version)


class Chaos(RayTiles):
    def __init__(self, **kw):
        super().__init__(**kw)
        self._remote = ray.remote(max_retries=3, num_cpus=1)(tiles_slow_on_victim)

    def dispatched(self, kind, refs, pinned):
        # the first market task (an Encoder; the keeper's speed checks at start are synthetic):
        # once its chunks on the victim node are running, the node is killed without grace
        if kind == "Encoder" and stats["killed"] is None:
            assert victim in pinned, "chunks pinned to every node"
            time.sleep(1.5)
            cluster.remove_node(workers[0], allow_graceful=False)
            stats["killed"] = victim

    def __call__(self, job, bases, indices):
        out = super().__call__(job, bases, indices)
        stats["tasks"].append(self.history[-1])
        if stats["killed"] is not None and stats["added"] is None:
            stats["added"] = "pending"
            todo.put("grow")
        write()
        return out


def grow():
    """A node joins, as one the autoscaler adds (Ray adds nodes from the main thread only)."""
    node = cluster.add_node(num_cpus=1, object_store_memory=150 << 20)
    for _ in range(240):
        if any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            break
        time.sleep(0.25)
    stats["added"] = node.node_id
    write()


def provider():
    try:
        serve_provider(rpc, keypair, db=store, listen=listen, tiles=tiles, max_active=2,
                       allow_private_urls=True)
    finally:
        todo.put("stop")


todo = queue.Queue()
try:
    tiles = Chaos(allow_private_urls=True)
    stats["ready"] = True
    stats["nodes"] = tiles.nodes()
    write()
    # the keeper in a thread (SIGTERM stops it); the main thread adds nodes when asked
    threading.Thread(target=provider, daemon=True).start()
    while (what := todo.get()) != "stop":
        grow()
finally:
    ray.shutdown()
    cluster.shutdown()
