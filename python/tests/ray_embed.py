"""A Ray Data pipeline on a three-node Ray cluster (a head and two worker nodes, each its own
raylet process) embedding texts through the market with `MarketEmbedder`. Run by
tests/tests/python.rs against a real validator:

    python ray_embed.py RPC KEYPAIR STORE TEXTS OUT.npy STATS.json SERVE_PORT

writes the embeddings in the texts' order and the run's figures (tasks, most in flight,
tasks/s, the nodes that posted). Then the market behind a Ray Serve deployment on the same
cluster answers a POST of four of the texts with the same vectors, and a bad one with 400."""
import json
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import ray
from ray.cluster_utils import Cluster

from compute_market.ray import MarketEmbedder

rpc, keypair, store, texts_path, out_path, stats_path, serve_port = sys.argv[1:8]
texts = open(texts_path, encoding="utf-8").read().splitlines()
cluster = Cluster(initialize_head=True, head_node_args=dict(
    num_cpus=1, object_store_memory=150 << 20, include_dashboard=False))
for _ in range(2):
    cluster.add_node(num_cpus=1, object_store_memory=150 << 20)
ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
try:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 3, f"three live nodes, not {len(nodes)}"
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    start = time.time()
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(
        MarketEmbedder,
        fn_constructor_kwargs=dict(rpc=rpc, keypair=keypair, store=store, reward="1",
                                   allow_private_urls=True),
        batch_size=50,
        concurrency=6,
        num_cpus=0.4,
        batch_format="numpy",
    )
    rows = {}
    tasks = {}
    for b in out.iter_batches(batch_format="numpy", batch_size=None):
        for i, e, t, s, f, n, c in zip(b["i"], b["embedding"], b["task"], b["started_at"],
                                      b["finished_at"], b["node"], b["cost"]):
            rows[int(i)] = e
            tasks[str(t)] = (float(s), float(f), str(n))
    wall = time.time() - start
    assert sorted(rows) == list(range(len(texts))), "every text embedded once"
    np.save(out_path, np.stack([rows[i] for i in range(len(texts))]))
    # most tasks in flight at once: the largest overlap of [started, finished]
    edges = sorted([(s, 1) for s, _, _ in tasks.values()] + [(f, -1) for _, f, _ in tasks.values()])
    live = most = 0
    for _, d in edges:
        live += d
        most = max(most, live)
    stats = dict(texts=len(texts), tasks=len(tasks), most_in_flight=most, seconds=round(wall, 1),
                 tasks_per_second=round(len(tasks) / wall, 3),
                 nodes=len({n for _, _, n in tasks.values()}), ray_nodes=len(nodes))
    # the market behind a Ray Serve endpoint: the same vectors for the same texts
    from ray import serve

    from compute_market.ray import deployment

    serve.start(http_options=dict(host="127.0.0.1", port=int(serve_port)))
    serve.run(deployment(ray_actor_options=dict(num_cpus=0.1)).bind(
        rpc, keypair, store=store, reward="1", allow_private_urls=True), route_prefix="/embed")
    url = f"http://127.0.0.1:{serve_port}/embed"

    def post(body):
        req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:  # a proxy's own page: shown as it came
                return e.code, {"error": raw.decode("utf-8", "replace")[:4000]}

    # "ready" is the application's word; the HTTP proxy learns its route a moment later (a
    # request before that was answered 404 in CI): asked until /embed is routed
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/-/routes", timeout=5) as r:
                if "/embed" in json.loads(r.read()):
                    break
        except (OSError, ValueError):
            pass
        if time.time() > deadline:
            raise RuntimeError("the Serve proxy did not route /embed within 60 s")
        time.sleep(0.5)
    code, answer = post({"texts": texts[:4]})
    assert code == 200, (code, answer)
    same = np.array_equal(np.array(answer["embeddings"], dtype=np.int16),
                          np.stack([rows[i] for i in range(4)]))
    bad_code, bad = post({"texts": ["fine", "  "]})
    stats["serve"] = dict(status=code, task=answer["task"], same_vectors=bool(same),
                          bad_status=bad_code, bad_error=bad.get("error"))
    serve.shutdown()
    json.dump(stats, open(stats_path, "w"))
    print(json.dumps(stats))
finally:
    ray.shutdown()
    cluster.shutdown()
