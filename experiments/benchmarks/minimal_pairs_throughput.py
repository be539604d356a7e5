"""Minimal-pair scoring throughput: packed kernels vs the one-sentence-at-a-time reference.

    python experiments/benchmarks/minimal_pairs_throughput.py [--pairs 2000] [--pll_pairs 300]

Model: the base config's size (configs/base.py) with random params, causal and masked (PLL).
Data: ZhoBLiMP from $BABYLM_DATA_DIR (an evenly spread fixed subset), else generated sentences.
Prints pairs/s for each kernel, the kernel's useful model FLOP/s (real tokens only) over a
large jitted matmul's FLOP/s measured in this process, and, last, the causal kernel's speed
over the reference's (both warmed up, on the same pairs).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import configs.base  # noqa: E402
from babylm_jax.data.tokenizer import CharTokenizer  # noqa: E402
from babylm_jax.eval import minimal_pairs, scoring, tasks  # noqa: E402
from babylm_jax.model.transformer import ModelConfig, Transformer  # noqa: E402
from babylm_jax.training import metrics  # noqa: E402


def load_sentences(num_pairs: int) -> list[str]:
    """Good and bad sentences of `num_pairs` pairs spread evenly over ZhoBLiMP (or generated)."""
    data_dir = os.environ.get("BABYLM_DATA_DIR")
    if data_dir and pathlib.Path(data_dir, "zhoblimp").is_dir():
        pairs = minimal_pairs.read_pairs(tasks.get_task("zhoblimp").find_files(data_dir), "zhoblimp")
        print(f"data: ZhoBLiMP ({len(pairs)} pairs), using {min(num_pairs, len(pairs))}")
    else:
        rng = np.random.default_rng(0)
        chars = [chr(c) for c in range(0x4E00, 0x4E00 + 2000)]
        make = lambda: "".join(rng.choice(chars, size=rng.integers(6, 20))) + "。"  # noqa: E731
        pairs = [minimal_pairs.Pair(make(), make(), "u", "p") for _ in range(num_pairs)]
        print(f"data: {num_pairs} generated pairs (set BABYLM_DATA_DIR for ZhoBLiMP)")
    index = np.linspace(0, len(pairs) - 1, min(num_pairs, len(pairs))).astype(int)
    return [s for i in index for s in (pairs[i].good, pairs[i].bad)]


def random_model(family: str, vocab_size: int) -> tuple[Transformer, dict]:
    model_config = configs.base.get_config().model
    model_config.update(family=family, vocab_size=max(vocab_size, model_config.vocab_size))
    model = Transformer(ModelConfig.from_config(model_config))
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    return model, nn.meta.unbox(params)


def forward_flops(config: ModelConfig, unit_lengths: list[int], reads: int, causal: bool) -> float:
    """Useful forward FLOPs: matmuls and attention over real tokens, projection at real reads."""
    d, n = config.d_model, config.num_layers
    head = 2 * d * d if config.has_head_transform else 0
    per_token = 2 * metrics.matmul_params(config) - head  # the head transform runs at reads only
    lengths = np.asarray(unit_lengths, np.float64)
    context = lengths * (lengths + 1) / 2 if causal else lengths * lengths  # query-key pairs per unit
    attention = 4 * n * d * context.sum()  # QK^T and PV
    return per_token * lengths.sum() + attention + reads * (2 * d * config.vocab_size + head)


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000, help="pairs for the causal kernel")
    parser.add_argument("--pll_pairs", type=int, default=300, help="pairs for the PLL kernel")
    parser.add_argument("--reference_pairs", type=int, default=100, help="pairs for the slow reference")
    parser.add_argument("--batch_size", type=int, default=tasks.EvalOptions.batch_size)
    parser.add_argument("--row_len", type=int, default=tasks.EvalOptions.row_len)
    args = parser.parse_args()

    print(f"devices: {jax.devices()}")
    texts = load_sentences(args.pairs)
    tokenizer = CharTokenizer(sorted(set("".join(texts))), byte_fallback=True)
    peak = metrics.measure_matmul_peak()
    print(f"measured matmul peak: {peak / 1e9:.1f} GFLOP/s")

    efficiency = {}
    for family, num_pairs in (("mlm", args.pll_pairs), ("causal", args.pairs)):
        model, params = random_model(family, tokenizer.vocab_size)
        variant = scoring.FAMILY_VARIANT[family]
        scorer = scoring.SentenceScorer(model, params, variant, tokenizer.mask_id, args.batch_size, args.row_len)
        inputs = [scoring.build_inputs(tokenizer.encode(t), variant, tokenizer.bos_id, tokenizer.cls_id,
                                       tokenizer.sep_id) for t in texts[: 2 * num_pairs]]
        _, compile_s = timed(scorer.score, inputs)  # compiles
        fast, seconds = timed(scorer.score, inputs)
        units = [len(x) for x in inputs] if variant == "causal" else [len(x) for x in inputs for _ in x[2:]]
        flops = forward_flops(model.config, units, scorer.last_reads, causal=variant == "causal")
        efficiency[family] = flops / seconds / peak
        print(f"{family}: {num_pairs / seconds:.1f} pairs/s ({num_pairs} pairs in {seconds:.2f}s, first call "
              f"{compile_s:.2f}s, compiles {scorer.num_compiles}); real/padded tokens "
              f"{scorer.last_real_tokens / scorer.last_padded_tokens:.3f}; useful {flops / seconds / 1e9:.1f} GFLOP/s "
              f"= {efficiency[family]:.2f} of peak")
        if family == "causal":
            subset = inputs[: 2 * args.reference_pairs]
            scoring.reference_scores(model, params, subset, variant, tokenizer.mask_id)  # warm up
            slow, ref_seconds = timed(scoring.reference_scores, model, params, subset, variant, tokenizer.mask_id)
            max_diff = float(np.abs(np.asarray(slow) - fast[: len(subset)]).max())
            reference_rate = args.reference_pairs / ref_seconds
            print(f"reference: {reference_rate:.1f} pairs/s ({args.reference_pairs} pairs); max |kernel - "
                  f"reference| = {max_diff:.2e}")
            ratio = (num_pairs / seconds) / reference_rate
    print(f"pll_useful_flops_vs_measured_peak: {efficiency['mlm']:.2f}")
    print(f"useful_flops_vs_measured_peak: {efficiency['causal']:.2f}")
    print(f"kernel_over_reference: {ratio:.1f}")


if __name__ == "__main__":
    main()
