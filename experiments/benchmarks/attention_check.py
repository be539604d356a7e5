"""Attention backends against "reference": forward and gradient differences on random inputs.

    python experiments/benchmarks/attention_check.py [--dtype bfloat16 --batch 4 --length 512] \
        [--out attention_check.json]

For each row kind (packed causal rows, packed bidirectional rows, the hybrid's mixed rows:
half causal, half bidirectional; each row packs documents of random length, some padding at
the end) it runs `model.attention.attend` with every backend this host can take ("reference",
"xla", and "cudnn" on a CUDA GPU in bf16/fp16; others are reported "skipped" with the reason)
and compares each against "reference": the output and the gradients of sum(out * w) for a
fixed random w with respect to q, k and v. Per comparison: max |a - b|, and that divided by
max |reference| (relative). Padding positions (segment 0) are compared too: every path gives
padding its own softmax over padding keys.

The last line is `worst_relative <value>` over every comparison that ran; the JSON holds all.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from babylm_jax.model import attention  # noqa: E402

ROWS = ("causal", "bidirectional", "mixed")


def packed_segments(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """[B, L] segment ids: documents of random length from 1, the last ~1/8 of each row padding (0)."""
    segments = np.zeros((batch, length), np.int32)
    for b in range(batch):
        pos, doc = 0, 1
        end = length - int(rng.integers(0, length // 8 + 1))
        while pos < end:
            size = int(rng.integers(1, max(2, length // 3)))
            segments[b, pos:min(end, pos + size)] = doc
            pos, doc = pos + size, doc + 1
    return segments


def make_mask(rows: str, segments: jax.Array) -> attention.Mask:
    if rows == "mixed":
        return attention.Mask.of(segments, jnp.arange(segments.shape[0]) % 2 == 0)
    return attention.Mask.of(segments, rows == "causal")


def backends(dtype) -> dict[str, str | None]:
    """Backend -> None (runs here) or the reason it is skipped."""
    platform = attention.platform_of(jax.default_backend())
    out = {}
    for kind in ("reference", "xla", "cudnn"):
        try:
            attention.resolve(kind, platform, dtype)
            out[kind] = None
        except ValueError as e:
            out[kind] = f"skipped: {e}"
    if platform != "cuda":
        out["cudnn"] = f"skipped: no GPU (backend {jax.default_backend()})"
    return out


def run_one(kind: str, mask: attention.Mask, q, k, v, w):
    def loss(q, k, v):
        out = attention.attend(q, k, v, mask, kind)
        return jnp.sum(out.astype(jnp.float32) * w), out
    (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
    return {"out": out, "dq": grads[0], "dk": grads[1], "dv": grads[2]}


def differences(ref: dict, got: dict) -> dict:
    result = {}
    for name in ref:
        a = np.asarray(ref[name], np.float32)
        b = np.asarray(got[name], np.float32)
        max_abs = float(np.max(np.abs(a - b)))
        scale = float(np.max(np.abs(a))) or 1.0
        result[name] = {"max_abs": max_abs, "relative": max_abs / scale, "finite": bool(np.isfinite(b).all())}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", default=None, help="JSON file for every figure")
    args = parser.parse_args()
    dtype = jnp.dtype(args.dtype)
    rng = np.random.default_rng(0)
    shape = (args.batch, args.length, args.heads, args.head_dim)
    q, k, v = (jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(3))
    w = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    segments = jnp.asarray(packed_segments(rng, args.batch, args.length))
    available = backends(dtype)
    report = {"device": f"{jax.devices()[0].device_kind} ({jax.default_backend()})", "jax": jax.__version__,
              "shape_BxLxHxK": list(shape), "dtype": args.dtype, "backends": available, "rows": {}}
    worst = 0.0
    for rows in ROWS:
        mask = make_mask(rows, segments)
        ref = run_one("reference", mask, q, k, v, w)
        report["rows"][rows] = {}
        for kind, skipped in available.items():
            if kind == "reference":
                continue
            if skipped:
                report["rows"][rows][kind] = skipped
                print(f"{rows:13s} {kind:6s} {skipped}")
                continue
            try:
                diff = differences(ref, run_one(kind, mask, q, k, v, w))
            except Exception as e:  # a backend that fails on one row kind: report it, go on with the rest
                report["rows"][rows][kind] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                print(f"{rows:13s} {kind:6s} {report['rows'][rows][kind]}")
                continue
            report["rows"][rows][kind] = diff
            worst = max([worst] + [d["relative"] for d in diff.values()])
            print(f"{rows:13s} {kind:6s} " + ", ".join(
                f"{name} max_abs {d['max_abs']:.3g} rel {d['relative']:.3g}{'' if d['finite'] else ' NONFINITE'}"
                for name, d in diff.items()))
    report["worst_relative"] = worst
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"worst_relative {worst:.3g}")


if __name__ == "__main__":
    main()
