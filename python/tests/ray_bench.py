"""The performance model of a Ray-backed provider measured: P = N·G·E/(1+L/C) with N = 1, 2, 3
Ray worker nodes (each its own raylet with one CPU, its kernels on one thread; the head holds
none), on a MatMulModP job on generated inputs, its tiles split over the nodes and computed by
the package's provider_tiles as a Ray-backed provider's are.

  G  one node's compute rate alone (work units/s, timed inside the worker)
  E  each node's rate while all N compute, over G (contention for the machine's cores)
  C  the compute time of the slowest chunk; L the rest of the wall time (dispatch, gather)
  P  measured: work / wall; predicted: N·G·E/(1+L/C)

    python ray_bench.py [--dims 1024,1024,1024] [--repeat 3]"""
import argparse
import json
import os
import time

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from compute_market import _native

ap = argparse.ArgumentParser()
ap.add_argument("--dims", default="1024,1024,1024")
ap.add_argument("--repeat", type=int, default=3)
args = ap.parse_args()
m, k, n = (int(x) for x in args.dims.split(","))


@ray.remote(num_cpus=1, max_retries=0)
def chunk(spec, indices):
    from compute_market import _native as nat
    from compute_market.ray import _node_id
    t = time.perf_counter()
    nat.provider_tiles(spec, [], indices)
    return _node_id(), time.perf_counter() - t


def run(nodes, spec, tiles, per_tile_work):
    per = -(-len(tiles) // len(nodes))
    chunks = [tiles[i:i + per] for i in range(0, len(tiles), per)]
    start = time.perf_counter()
    refs = [chunk.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nd, soft=False))
            .remote(spec, c) for c, nd in zip(chunks, nodes)]
    got = ray.get(refs)
    wall = time.perf_counter() - start
    rates = [len(c) * per_tile_work / s for c, (_, s) in zip(chunks, got)]
    return wall, max(s for _, s in got), rates


rows = []
spec = _native.generated_matmul(m, k, n)
_, _, tile_count = _native.job_info(spec)
work = m * k * n
per_tile = work / tile_count
G = None
for N in (1, 2, 3):
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False,
                                                         object_store_memory=100 << 20))
    workers = [c.add_node(num_cpus=1, object_store_memory=100 << 20) for _ in range(N)]
    # a node is one core: its worker's kernels on one thread (rayon), as a one-GPU node is one GPU
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False,
             runtime_env=dict(env_vars=dict(RAYON_NUM_THREADS="1")))
    nodes = [w.node_id for w in workers]
    tiles = list(range(tile_count))
    run(nodes, spec, tiles[:N], per_tile)  # warm the workers (process start, imports)
    best = None
    for _ in range(args.repeat):
        r = run(nodes, spec, tiles, per_tile)
        best = r if best is None or r[0] < best[0] else best
    wall, compute, rates = best
    if N == 1:
        G = rates[0]
    E = sum(rates) / len(rates) / G
    L = wall - compute
    predicted = N * G * E / (1 + L / compute)
    rows.append(dict(N=N, G=round(G / 1e9, 3), E=round(E, 3), L_over_C=round(L / compute, 3),
                     predicted_gwork_s=round(predicted / 1e9, 3),
                     measured_gwork_s=round(work / wall / 1e9, 3), wall_s=round(wall, 3)))
    ray.shutdown()
    c.shutdown()

print(f"MatMulModP {m}x{k}x{n} ({tile_count} tiles) on Ray worker nodes of one core each, "
      f"{os.cpu_count()} cores here:")
print(f"{'N':>2} {'G Gwork/s':>10} {'E':>6} {'L/C':>6} {'P predicted':>12} {'P measured':>11} {'wall s':>7}")
for r in rows:
    print(f"{r['N']:>2} {r['G']:>10} {r['E']:>6} {r['L_over_C']:>6} {r['predicted_gwork_s']:>12} "
          f"{r['measured_gwork_s']:>11} {r['wall_s']:>7}")
print(json.dumps(rows))
