#!/usr/bin/env python3
"""Trains the digits MLP on scikit-learn's bundled UCI digits set and writes the integer model
the market runs (PROTOCOL §5, Mlp): int8 weights, int32 biases, per-channel fixed-point
requantization, and the 450-row held-out split as a batch with its labels.

    scripts/digits-model            # (the wrapper: installs its packages into the cache first)

Writes models/digits-mlp.safetensors and models/digits-heldout.safetensors and prints float and
integer accuracy on the held-out split. The integer forward pass here is the protocol's rule
written again in numpy (int64 throughout), so the figure it prints is the one the keeper's
Rust reference must reproduce bit for bit (keeper/tests/inference.rs).
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

HIDDEN = 128
SEED = 7
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "models")


def requant(acc, mult, shift):
    """The protocol's rule: clamp(floor((acc·M + 2^(s−1)) / 2^s), −128, 127), in int64."""
    y = (acc.astype(np.int64) * mult.astype(np.int64) + (np.int64(1) << (shift.astype(np.int64) - 1))) >> shift.astype(np.int64)
    return np.clip(y, -128, 127)


def forward(layers, x):
    """Integer forward pass: hidden layers requantized and ReLU'd, the last one's int32
    accumulators are the logits."""
    a = x.astype(np.int64)
    for i, l in enumerate(layers):
        acc = a @ l["weight"].astype(np.int64).T + l["bias"].astype(np.int64)
        assert np.abs(acc).max() < 2**31, "accumulator bound"
        if i + 1 < len(layers):
            a = np.maximum(requant(acc, l["multiplier"], l["shift"]), 0)
        else:
            return acc


def fixed_point(real):
    """M (in [2^30, 2^31)) and shift s with M / 2^s ≈ real, per channel."""
    real = np.asarray(real, dtype=np.float64)
    shift = np.floor(30 - np.log2(real)).astype(np.int64)
    mult = np.round(real * np.exp2(shift)).astype(np.int64)
    over = mult >= 2**31
    mult[over] //= 2
    shift[over] -= 1
    assert np.isfinite(real).all() and (real > 0).all(), real
    assert (mult >= 1).all() and (mult < 2**31).all() and (shift >= 1).all() and (shift <= 62).all()
    return mult.astype(np.int32), shift.astype(np.int32)


def main():
    d = load_digits()
    x, y = d.data.astype(np.int64), d.target.astype(np.int64)  # pixels 0..16
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=450, random_state=SEED, stratify=y)
    # the float model sees pixels / 16; the integer one sees the pixels (input scale 1/16)
    clf = MLPClassifier(hidden_layer_sizes=(HIDDEN,), max_iter=2000, random_state=SEED, alpha=1e-3)
    clf.fit(xtr / 16.0, ytr)
    float_acc = float((clf.predict(xte / 16.0) == yte).mean())
    (w0, w1), (b0, b1) = [w.T for w in clf.coefs_], clf.intercepts_
    s_in = 1.0 / 16
    # layer 0: per-output-channel weight scales; its output scale from the training set
    s_w0 = np.abs(w0).max(axis=1) / 127
    # a unit whose weights decayed to nothing (regularization) keeps a usable scale
    s_w0 = np.maximum(s_w0, s_w0.max() / 1000)
    q_w0 = np.round(w0 / s_w0[:, None]).astype(np.int8)
    q_b0 = np.clip(np.round(b0 / (s_w0 * s_in)), -(2**24), 2**24).astype(np.int32)
    h = np.maximum(xtr / 16.0 @ w0.T + b0, 0)
    s_h = np.percentile(h, 99.9) / 127
    m0, sh0 = fixed_point(s_w0 * s_in / s_h)
    # last layer: one weight scale (logits keep their order)
    s_w1 = np.abs(w1).max() / 127
    q_w1 = np.round(w1 / s_w1).astype(np.int8)
    q_b1 = np.clip(np.round(b1 / (s_w1 * s_h)), -(2**24), 2**24).astype(np.int32)
    layers = [
        {"weight": q_w0, "bias": q_b0, "multiplier": m0, "shift": sh0},
        {"weight": q_w1, "bias": q_b1},
    ]
    logits = forward(layers, xte)
    int_acc = float((logits.argmax(axis=1) == yte).mean())
    os.makedirs(OUT, exist_ok=True)
    tensors = {}
    for i, l in enumerate(layers):
        for k, v in l.items():
            tensors[f"l{i}.{k}"] = np.ascontiguousarray(v)
    meta = {
        "model": "digits MLP 64-128-10 (scikit-learn MLPClassifier on sklearn's UCI digits)",
        "float_accuracy": f"{float_acc:.6f}",
        "integer_accuracy": f"{int_acc:.6f}",
        "heldout_rows": str(len(yte)),
        "seed": str(SEED),
        # the pixel range the model learned (UCI digits: 0..16 ink per 4×4 block); clients are
        # warned of batch values outside it (keeper task post / compute)
        "input_range": "0..16",
    }
    save_file(tensors, os.path.join(OUT, "digits-mlp.safetensors"), metadata=meta)
    save_file(
        {
            "x": np.ascontiguousarray(xte.astype(np.int8)),
            "labels": np.ascontiguousarray(yte.astype(np.uint8)),
            # this forward pass's logits: the Rust reference must give the same, bit for bit
            "logits": np.ascontiguousarray(logits.astype(np.int32)),
        },
        os.path.join(OUT, "digits-heldout.safetensors"),
        metadata={"source": "sklearn/datasets/data/digits.csv.gz, train_test_split(test_size=450, random_state=7, stratify)"},
    )
    print(json.dumps({"float_accuracy": float_acc, "integer_accuracy": int_acc, "heldout": len(yte)}))


if __name__ == "__main__":
    main()
