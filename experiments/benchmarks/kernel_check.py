"""The fused kernels' numbers on this device against the XLA forms, at the GPU recipes' shapes.

    python experiments/benchmarks/kernel_check.py --out OUT/kernel_check.json [--tiny]

The loss over the vocabulary (`train.loss_kernel` "blockwise" and "pallas" against "xla"), its value and
its gradients for x and the embedding, in bf16 matmuls as the recipes run it, at causal_14m's
(V 32,768, D 256) and hybrid_100m's (V 16,384, D 768) shapes; and the fused add + norm
(`model.norm_kernel="pallas"`) against the XLA LayerNorm of the sum, its two outputs and four
gradients. On a CPU the Pallas kernels run in interpret mode (`--tiny`: small shapes, for a dry run).
Differences are relative to the largest magnitude of the XLA form's array; bf16 rounding allows 2e-2.

Ends with `kernel_check: ok` or `kernel_check: MISMATCH <names>` (exit status 1).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from babylm_jax.model import loss  # noqa: E402
from babylm_jax.model.fused_norm import add_norm  # noqa: E402

TOLERANCE = 2e-2
LOSS_SHAPES = {"causal_14m": (8192, 32_768, 256), "hybrid_100m": (8192, 16_384, 768)}  # rows, vocabulary, width
NORM_SHAPES = {"causal_14m": (16, 512, 256), "hybrid_100m": (16, 512, 768)}
TINY_LOSS, TINY_NORM = (40, 300, 32), (2, 24, 48)


def relative(a: jax.Array, b: jax.Array) -> float:
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    return float(jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1e-30))


def loss_rows(name: str, shape: tuple[int, int, int], interpret: bool) -> dict[str, float]:
    rows, vocab, width = shape
    k = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(k[0], (rows, width))
    embed = jax.random.normal(k[1], (vocab, width)) * 0.02 * width ** 0.5
    targets = jax.random.randint(k[2], (rows,), 0, vocab)
    weights = (jax.random.uniform(k[3], (rows,)) > 0.2).astype(jnp.float32)

    def run(kernel):
        fn = lambda x, e: loss.projected_loss(kernel, x, e, targets, weights, 1e-4, 1024, 1,  # noqa: E731
                                              jnp.bfloat16, jnp.float32, interpret)
        return jax.jit(jax.value_and_grad(fn, (0, 1)))(x, embed)

    want, (want_x, want_e) = run("xla")
    found = {}
    for kernel in ("blockwise", "pallas"):
        got, (got_x, got_e) = run(kernel)
        found.update({f"{name}/loss_{kernel}/value": relative(got, want),
                      f"{name}/loss_{kernel}/grad_x": relative(got_x, want_x),
                      f"{name}/loss_{kernel}/grad_embed": relative(got_e, want_e)})
    return found


def norm_rows(name: str, shape: tuple[int, int, int], interpret: bool) -> dict[str, float]:
    k = jax.random.split(jax.random.key(1), 5)
    width = shape[-1]
    x = jax.random.normal(k[0], shape)
    h = jax.random.normal(k[1], shape).astype(jnp.bfloat16)
    scale, bias = 1 + 0.1 * jax.random.normal(k[2], (width,)), 0.1 * jax.random.normal(k[3], (width,))
    cotangent = jax.random.normal(k[4], shape)

    def xla(x, h, scale, bias):
        y = x + h.astype(jnp.float32)
        mean = jnp.mean(y, -1, keepdims=True)
        normed = (y - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(y - mean), -1, keepdims=True) + 1e-6)
        return y, (normed * scale + bias).astype(jnp.bfloat16)

    def fused(x, h, scale, bias):
        return add_norm(x, h, scale, bias, False, 1e-6, jnp.bfloat16, interpret)

    def run(fn):
        outs, pullback = jax.vjp(jax.jit(fn), x, h, scale, bias)
        return outs, pullback((cotangent, cotangent.astype(jnp.bfloat16)))

    (want, want_grads), (got, got_grads) = run(xla), run(fused)
    found = {f"{name}/norm_pallas/{out}": relative(a, b) for out, a, b in zip(("stream", "normed"), got, want)}
    for arg, a, b in zip(("x", "h", "scale", "bias"), got_grads, want_grads):
        found[f"{name}/norm_pallas/grad_{arg}"] = relative(a, b)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help="small shapes (a dry run on a CPU)")
    args = parser.parse_args(argv)
    interpret = jax.default_backend() == "cpu"
    found = {}
    for name in LOSS_SHAPES:
        found.update(loss_rows(name, TINY_LOSS if args.tiny else LOSS_SHAPES[name], interpret))
        found.update(norm_rows(name, TINY_NORM if args.tiny else NORM_SHAPES[name], interpret))
    for key, value in found.items():
        print(f"{key}: {value:.2e}", flush=True)
    bad = [key for key, value in found.items() if not value <= TOLERANCE]
    pathlib.Path(args.out).write_text(json.dumps({"backend": jax.default_backend(), "tolerance": TOLERANCE,
                                                  "relative_difference": found, "mismatches": bad}, indent=1))
    print("kernel_check: ok" if not bad else f"kernel_check: MISMATCH {' '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
