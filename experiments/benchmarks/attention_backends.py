"""Attention forward + backward on this host: each CPU path of `model.attention` against "reference".

    python experiments/benchmarks/attention_backends.py [--batch 8 --length 128 --heads 4 --head_dim 32]

The defaults are configs/base.py's attention (one micro-batch of 8 rows of 128 tokens, 4
heads of 32), packed rows of two documents, causal. Each path is jitted, warmed up, then
timed `--repeats` times interleaved with the others in one process; the best times count.
The last line gives the ratios, reference's time over each path's (above 1: that path is
faster than "reference", and `model.attention=auto` should take it on CPU).
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from conditions import Conditions

from babylm_jax.model import attention


def step(kind: str, mask: attention.Mask):
    """Jitted gradient of a scalar of the attention output with respect to q, k and v."""
    loss = lambda q, k, v: jnp.sum(attention.attend(q, k, v, mask, kind).astype(jnp.float32) ** 2)  # noqa: E731
    return jax.jit(jax.grad(loss, (0, 1, 2)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head_dim", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    conditions = Conditions.start()
    shape = (args.batch, args.length, args.heads, args.head_dim)
    q, k, v = (jnp.asarray(np.random.default_rng(i).standard_normal(shape), args.dtype) for i in range(3))
    segments = jnp.where(jnp.arange(args.length) < args.length * 2 // 3, 1, 2)[None].repeat(args.batch, 0)
    mask = attention.Mask(attention.attention_mask(segments, jnp.ones((args.batch,), bool)), all_causal=True)
    kinds = ("reference", "xla")
    steps = {kind: step(kind, mask) for kind in kinds}
    best = {kind: float("inf") for kind in kinds}
    for kind in kinds:
        jax.block_until_ready(steps[kind](q, k, v))
    for _ in range(args.repeats):
        conditions.probe()
        for kind in kinds:
            start = time.perf_counter()
            for _ in range(args.steps):
                out = steps[kind](q, k, v)
            jax.block_until_ready(out)
            best[kind] = min(best[kind], (time.perf_counter() - start) / args.steps)
    print(", ".join(f"{kind} {best[kind] * 1e3:.2f} ms" for kind in kinds), f"({args.dtype}, {shape})")
    conditions.report()
    print(", ".join(f"reference_over_{kind} {best['reference'] / best[kind]:.2f}" for kind in kinds[1:]))


if __name__ == "__main__":
    main()
