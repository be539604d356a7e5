"""The KV-cache decode (`model.decode`) against recomputing the whole prefix for every new token.

    python experiments/benchmarks/decode_speed.py [--prompts 8 --new_tokens 256 --repeats 3]

configs/base.py's model (random weights; model.max_len raised to hold the prompts and the new
tokens) continues `--prompts` prompts of 4..11 characters greedily for `--new_tokens` tokens, no stop
id. Both sides are one compiled program over the same left-padded batch: the cached decode (one
prefill, then one token at a time over the cache) and a recompute that runs the full model over the
whole [B, P + N] buffer for each new token (padding and later slots masked, the logits read at the
last filled slot), which is what decoding without a cache costs at a fixed, compiled-once shape.
Each side is timed `--repeats` times, interleaved, with the matmul peak probed before each pair
(`conditions.py`); the best times count and both must give the same tokens. The run's conditions
come before the last line, the speed ratio.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from conditions import Conditions

import configs.base
from babylm_jax.config.schema import RunConfig
from babylm_jax.core.vocab import BOS_ID, PAD_ID
from babylm_jax.model import decode
from babylm_jax.training import state


def recompute_program(model, new_tokens: int):
    """Greedy decoding with no cache: the full forward over the buffer for each new token."""

    def run(params, tokens_BxP, pads_B):
        b, p = tokens_BxP.shape
        slots_S = jnp.arange(p + new_tokens)
        buffer_BxS = jnp.concatenate([tokens_BxP, jnp.full((b, new_tokens), PAD_ID, jnp.int32)], axis=1)
        positions_BxS = jnp.maximum(slots_S[None] - pads_B[:, None], 0)

        def one_token(i, buffer_BxS):
            segment_ids_BxS = ((slots_S[None] >= pads_B[:, None]) & (slots_S[None] < p + i)).astype(jnp.int32)
            logits_BxSxV = model.apply(params, buffer_BxS, segment_ids_BxS, positions_BxS, True)
            token_B = jnp.argmax(logits_BxSxV[:, p + i - 1], axis=-1).astype(jnp.int32)
            return jax.lax.dynamic_update_slice_in_dim(buffer_BxS, token_B[:, None], p + i, axis=1)

        return jax.lax.fori_loop(0, new_tokens, one_token, buffer_BxS)[:, p:]

    return jax.jit(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    conditions = Conditions.start()

    config = configs.base.get_config()
    config.model.max_len = 16 + args.new_tokens
    rc = RunConfig.from_config(config).model
    model = state.build_model(rc)
    params = jax.jit(model.init)(jax.random.key(0), jnp.ones((1, 8), jnp.int32))
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    rng = np.random.default_rng(0)
    rows = [[BOS_ID, *rng.integers(7, rc.vocab_size, size=int(n))] for n in rng.integers(4, 12, size=args.prompts)]
    width = max(map(len, rows))
    tokens = np.full((len(rows), width), PAD_ID, np.int32)
    for row, ids in zip(tokens, rows):
        row[width - len(ids):] = ids
    pads = np.asarray([width - len(ids) for ids in rows], np.int32)
    print(f"{rc.d_model}-wide, {rc.num_layers} layers, vocabulary {rc.vocab_size}: {args.prompts} prompts "
          f"({width} slots with padding) x {args.new_tokens} new tokens, greedy")

    cached = decode.make_generate(model, decode.Sampling(args.new_tokens, temperature=0.0), -1, rc.vocab_size)
    recompute = recompute_program(model, args.new_tokens)
    key = jax.random.key(0)
    start = time.perf_counter()
    cached_tokens = np.asarray(cached(params, tokens, pads, key))
    print(f"compile + first run: cached {time.perf_counter() - start:.1f} s", end="")
    start = time.perf_counter()
    recompute_tokens = np.asarray(recompute(params, tokens, pads))
    print(f", recompute {time.perf_counter() - start:.1f} s")
    same = (cached_tokens == recompute_tokens).mean()
    print(f"same greedy tokens: {same:.4f} of {cached_tokens.size}")
    if same < 0.99:
        raise SystemExit("the cached decode and the recompute disagree")
    cached_s = recompute_s = float("inf")
    for _ in range(args.repeats):
        conditions.probe()
        start = time.perf_counter()
        jax.block_until_ready(cached(params, tokens, pads, key))
        cached_s = min(cached_s, time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(recompute(params, tokens, pads))
        recompute_s = min(recompute_s, time.perf_counter() - start)
    new = args.prompts * args.new_tokens
    print(f"cached: {cached_s:.2f} s, {new / cached_s:,.0f} tokens/s")
    print(f"recompute: {recompute_s:.2f} s, {new / recompute_s:,.0f} tokens/s")
    conditions.report()
    print(f"cached_over_recompute: {recompute_s / cached_s:.2f}")


if __name__ == "__main__":
    main()
