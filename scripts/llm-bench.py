"""SmolLM2 text generation beside llama.cpp (issue 44): the keeper's integer decoder
(`keeper bench --generate`) and llama.cpp (llama-cpp-python, built from source) on the same
GGUF, the same prompt and the same threads, alternating, in one run. Prints prefill tokens/s,
one stream's decode tokens/s and a batch's decode tokens/s for each, the ratios, the verifier's
check against generation, and the CPU. Run by scripts/llm-bench."""

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import time

import numpy as np

PROMPT = "Write a short story about a robot who learns to paint."


def cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class LlamaCpp:
    """llama.cpp through llama-cpp-python's C API: greedy decoding, one or many sequences."""

    def __init__(self, gguf, threads, batch, ctx_per_seq):
        import llama_cpp as L

        self.L = L
        # llama.cpp's own log (every tensor it loads) stays out of the report
        self._quiet = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(gguf.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx = batch * ctx_per_seq
        cp.n_batch = max(512, batch)
        cp.n_ubatch = max(512, batch)
        cp.n_seq_max = batch
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.kv_unified = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        # the end of a turn and of the text: masked, as the keeper's bench masks its end of turn
        self.ends = sorted({L.llama_vocab_eot(self.vocab), L.llama_vocab_eos(self.vocab)})
        self.batch = L.llama_batch_init(max(512, batch), 0, batch)


    def clear(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def decode(self, items):
        """items: (token, position, sequence, wants logits)."""
        b = self.batch
        for i, (t, p, s, out) in enumerate(items):
            b.token[i] = t
            b.pos[i] = p
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = s
            b.logits[i] = out
        b.n_tokens = len(items)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def argmax(self, i):
        ptr = self.L.llama_get_logits_ith(self.ctx, i)
        row = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        row[self.ends] = -np.inf  # every stream runs its steps, as the keeper's bench does
        return int(np.argmax(row))

    def run(self, ids, new, streams):
        """Prefill seconds (one stream), decode seconds of `new` tokens for `streams` streams."""
        self.clear()
        t = time.perf_counter()
        self.decode([(tok, p, 0, p == len(ids) - 1) for p, tok in enumerate(ids)])
        prefill = time.perf_counter() - t
        self.clear()
        for s in range(streams):
            self.decode([(tok, p, s, p == len(ids) - 1) for p, tok in enumerate(ids)])
        last = [self.argmax(len(ids) - 1)] * streams
        t = time.perf_counter()
        for step in range(new - 1):
            pos = len(ids) + step
            self.decode([(last[s], pos, s, True) for s in range(streams)])
            last = [self.argmax(s) for s in range(streams)]
        return prefill, time.perf_counter() - t


def keeper(binary, model, prompt, new, batch, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run(
        [binary, "--output", "json", "bench", "--model", model, "--generate", prompt,
         "--new-tokens", str(new), "--batch", str(batch)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keeper", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--json")
    a = ap.parse_args()
    ll = LlamaCpp(a.gguf, a.threads, a.batch, 512)
    # the keeper's prompt ids (its model's chat template, system turn included): both prefill
    # the same tokens
    ids = keeper(a.keeper, a.model, a.prompt, 2, 1, a.threads)["prompt_ids"]
    rows = {"keeper": [], "llama.cpp": [], "llama.cpp batch": []}
    for r in range(a.rounds):
        k = keeper(a.keeper, a.model, a.prompt, a.new, a.batch, a.threads)
        rows["keeper"].append(k)
        pre, dec = ll.run(ids, a.new, 1)
        _, bat = ll.run(ids, a.new, a.batch)
        rows["llama.cpp"].append({
            "prefill_tokens_per_s": len(ids) / pre,
            "decode_tokens_per_s": (a.new - 1) / dec,
        })
        rows["llama.cpp batch"].append({"batch_tokens_per_s": a.batch * (a.new - 1) / bat})
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    med = lambda name, key: statistics.median(x[key] for x in rows[name])
    k = {key: med("keeper", key) for key in
         ["prefill_tokens_per_s", "decode_tokens_per_s", "batch_tokens_per_s", "verify_fraction"]}
    l = {"prefill_tokens_per_s": med("llama.cpp", "prefill_tokens_per_s"),
         "decode_tokens_per_s": med("llama.cpp", "decode_tokens_per_s"),
         "batch_tokens_per_s": med("llama.cpp batch", "batch_tokens_per_s")}
    report = {
        "cpu": cpu(), "threads": a.threads, "prompt_tokens": len(ids), "new_tokens": a.new,
        "batch": a.batch, "rounds": a.rounds, "keeper": k, "llama.cpp": l,
        "ratio": {key: k[key] / l[key] for key in l},
    }
    print(f"\nSmolLM2-135M-Instruct Q4_1 on {report['cpu']}, {a.threads} threads, "
          f"a {len(ids)}-token prompt, {a.new} new tokens, batch {a.batch}, median of {a.rounds}")
    print(f"| | keeper (integer, verified) | llama.cpp 0.3.36 (float) | keeper / llama.cpp |")
    print(f"|---|---:|---:|---:|")
    for key, name in [("decode_tokens_per_s", "decode, one stream (tokens/s)"),
                      ("batch_tokens_per_s", f"decode, {a.batch} streams (tokens/s)"),
                      ("prefill_tokens_per_s", "prefill (tokens/s)")]:
        print(f"| {name} | {k[key]:.1f} | {l[key]:.1f} | {k[key] / l[key]:.2f} |")
    print(f"\nthe verifier's prefill check costs {k['verify_fraction']:.3f} of the provider's generation")
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
