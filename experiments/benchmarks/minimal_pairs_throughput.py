"""Minimal-pair scoring throughput: packed kernels vs the one-sentence-at-a-time reference.

    python experiments/benchmarks/minimal_pairs_throughput.py [--pairs 2000] [--pll_pairs 300]
        [--config configs/base.py] [--repeats 3]

Model: the size of `--config`'s model (default the base config) with random params, causal
and masked (PLL). Data: ZhoBLiMP from $BABYLM_DATA_DIR (an evenly spread fixed subset), else
generated sentences. Prints pairs/s for each kernel, the kernel's useful model FLOP/s (real
tokens only) over a large jitted matmul's FLOP/s measured in this process, the same for the
reference, and the causal kernel's speed over the reference's (both warmed up, on the same
pairs). Timings are the best of `--repeats` runs, and the peak is measured just before each,
so that other load on a shared machine does not decide the ratios; the run's conditions
(peak against the best known idle peak, load before and after: `conditions.py`) are printed
before the last lines.

With torch and transformers installed (the export extra), the same models are exported
(`hf.writer.write_export`) and scored in PyTorch the way the official pipeline does it
(evaluation_pipeline/sentence_zero_shot, compute_results.py: batches of 64 items, each
sentence right-padded to the batch's longest, full logits, log-softmax, gather; PLL: every
masked copy, 64 copies a forward, the logits at the masked index), in this process on the
same sentences, checked against the kernel's scores. Last lines (`key: value`):
`kernel_over_official_causal` and `kernel_over_official_pll` (pairs/s over pairs/s).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # conditions.py, when a test loads this file
from conditions import Conditions  # noqa: E402
from babylm_jax.config.files import load_config_file  # noqa: E402
from babylm_jax.core.families import Scoring, family_spec  # noqa: E402
from babylm_jax.corpus.tokenizer import CharTokenizer  # noqa: E402
from babylm_jax.eval.zero_shot import minimal_pairs, scoring  # noqa: E402
from babylm_jax.tasks import registry as tasks  # noqa: E402
from babylm_jax.config.evaluation import default_settings  # noqa: E402
from babylm_jax.config.model import ModelConfig  # noqa: E402
from babylm_jax.model.transformer import Transformer  # noqa: E402
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


def random_model(config_path: str, family: str, vocab_size: int) -> tuple[Transformer, dict]:
    model_config = load_config_file(config_path).model
    # float32 always: the peak is a float32 matmul (accelerator recipes compute in bfloat16).
    model_config.update(family=family, vocab_size=max(vocab_size, model_config.vocab_size), dtype="float32")
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


def best_time(repeats: int, fn, *args):
    """The output of `fn(*args)` and its best wall time over `repeats` runs."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return out, best


def scored_units(inputs: list[list[int]], variant: Scoring) -> list[int]:
    """The lengths of the units a kernel runs: each sentence once (causal), one masked copy per
    token between the framing's two specials (PLL)."""
    return [len(x) for x in inputs] if variant is Scoring.CAUSAL else [len(x) for x in inputs for _ in x[2:]]


def official_scores(hf_model, inputs: list[list[int]], variant: Scoring, mask_id: int, pad_id: int,
                    batch_size: int = 64) -> np.ndarray:
    """Sentence scores computed as the official pipeline computes them (compute_results.py):
    causal, `batch_size` sentences a forward, right-padded, full log-softmax, targets gathered
    and summed; pll, each sentence's masked copies (one per token between [cls] and [sep]),
    `batch_size` copies a forward, log-softmax of the logits at the masked index."""
    import torch

    def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(map(len, rows))
        tokens = torch.full((len(rows), length), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        return tokens, mask

    scores = []
    with torch.no_grad():
        if variant is Scoring.CAUSAL:
            for start in range(0, len(inputs), batch_size):
                rows = inputs[start:start + batch_size]
                tokens, mask = padded(rows)
                log_probs = torch.log_softmax(hf_model(input_ids=tokens, attention_mask=mask).logits, dim=-1)
                targets = torch.cat([tokens[:, 1:], torch.zeros_like(tokens[:, :1])], dim=1)
                target_log_probs = torch.gather(log_probs, -1, targets.unsqueeze(-1)).squeeze(-1)
                phrase = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)
                scores.append(torch.sum(target_log_probs * phrase, dim=1))
            return torch.cat(scores).double().numpy()
        copies, index, targets, owner = [], [], [], []
        for s, row in enumerate(inputs):
            for i in range(1, len(row) - 1):
                copies.append(scoring.masked_copy(row, i, mask_id, None))
                index.append(i)
                targets.append(row[i])
                owner.append(s)
        reads = []
        for start in range(0, len(copies), batch_size):
            tokens, mask = padded(copies[start:start + batch_size])
            logits = hf_model(input_ids=tokens, attention_mask=mask).logits
            masked_logits = logits[torch.arange(len(tokens)), torch.tensor(index[start:start + batch_size])]
            log_probs = torch.log_softmax(masked_logits, dim=-1)
            reads.append(torch.gather(log_probs, -1, torch.tensor(targets[start:start + batch_size])[:, None])[:, 0])
        return np.bincount(owner, weights=torch.cat(reads).double().numpy(), minlength=len(inputs))


def official_comparison(scorer: scoring.SentenceScorer, hf_model, inputs: list[list[int]], tokenizer,
                        timed=lambda fn, *args: best_time(1, fn, *args)) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The official scorer's and the kernel's scores of the same `inputs` and their seconds
    (`timed(fn, *args)` -> (output, seconds)): (official, kernel, official_s, kernel_s)."""
    pad_id = tokenizer.eos_id if scorer.variant is Scoring.CAUSAL else tokenizer.cls_id  # as the pipeline pads
    theirs, official_s = timed(official_scores, hf_model, inputs, scorer.variant, tokenizer.mask_id, pad_id)
    ours, kernel_s = timed(scorer.score, inputs)
    return np.asarray(theirs), np.asarray(ours), official_s, kernel_s


def export_for_torch(model: Transformer, params: dict, tokenizer, directory: str):
    """The model exported as the official pipeline loads it (AutoModelFor*LM, remote code), or None
    without the export extra."""
    try:
        import transformers

        from babylm_jax.hf import writer
    except ImportError as error:
        print(f"official scorer skipped: {error} (pip install -e '.[export]')")
        return None
    out = writer.write_export(pathlib.Path(directory) / model.config.family, model.config, params, tokenizer,
                              provenance={"benchmark": "minimal_pairs_throughput"})
    auto = transformers.AutoModelForCausalLM if model.config.family == "causal" else transformers.AutoModelForMaskedLM
    return auto.from_pretrained(out, trust_remote_code=True).eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000, help="pairs for the causal kernel")
    parser.add_argument("--pll_pairs", type=int, default=300, help="pairs for the PLL kernel")
    parser.add_argument("--reference_pairs", type=int, default=100, help="pairs for the slow reference")
    scoring_defaults = default_settings().scoring  # configs/eval.py
    parser.add_argument("--batch_size", type=int, default=scoring_defaults.batch_size)
    parser.add_argument("--row_len", type=int, default=scoring_defaults.row_len)
    parser.add_argument("--config", default=str(ROOT / "configs" / "base.py"), help="config file of the model size")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per kernel; the best counts")
    parser.add_argument("--official_pairs", type=int, default=200, help="pairs for the official PyTorch causal scorer")
    parser.add_argument("--official_pll_pairs", type=int, default=30, help="pairs for the official PyTorch PLL scorer")
    args = parser.parse_args()

    conditions = Conditions.start()
    export_dir = tempfile.TemporaryDirectory(prefix="minimal_pairs_throughput_")
    print(f"devices: {jax.devices()}; model size from {args.config}")
    texts = load_sentences(max(args.pairs, args.pll_pairs, args.reference_pairs, args.official_pairs))
    tokenizer = CharTokenizer(sorted(set("".join(texts))), byte_fallback=True)

    def peak_and_time(fn, *fn_args):
        conditions.probe()
        return best_time(args.repeats, fn, *fn_args)

    rates, flops_per_s, official = {}, {}, {}
    for family, num_pairs in (("mlm", args.pll_pairs), ("causal", args.pairs)):
        model, params = random_model(args.config, family, tokenizer.vocab_size)
        variant = family_spec(family).scoring
        scorer = scoring.SentenceScorer(model, params, variant, tokenizer.mask_id, args.batch_size, args.row_len)
        inputs = [family_spec(family).framing.scoring_input(tokenizer.encode(t)) for t in texts[: 2 * num_pairs]]
        num_pairs = len(inputs) // 2
        _, compile_s = best_time(1, scorer.score, inputs)  # compiles
        fast, seconds = peak_and_time(scorer.score, inputs)
        units = scored_units(inputs, variant)
        useful_flops = forward_flops(model.config, units, scorer.last_reads, causal=variant is Scoring.CAUSAL)
        rates[family], flops_per_s[family] = num_pairs / seconds, useful_flops / seconds
        print(f"{family}: {rates[family]:.1f} pairs/s ({num_pairs} pairs in {seconds:.2f}s, first call "
              f"{compile_s:.2f}s, compiles {scorer.num_compiles}); real/padded tokens "
              f"{scorer.last_real_tokens / scorer.last_padded_tokens:.3f}; "
              f"useful {useful_flops / seconds / 1e9:.1f} GFLOP/s")
        hf_model = export_for_torch(model, params, tokenizer, export_dir.name)
        if hf_model is not None:
            subset = inputs[: 2 * min(num_pairs, args.official_pairs if family == "causal" else args.official_pll_pairs)]
            theirs, ours, official_s, kernel_s = official_comparison(scorer, hf_model, subset, tokenizer, peak_and_time)
            official[variant.value] = official_s / kernel_s
            print(f"official scorer ({variant.value}, PyTorch, {torch_threads()} threads): {len(subset) / 2 / official_s:.1f} "
                  f"pairs/s against the kernel's {len(subset) / 2 / kernel_s:.1f} on the same {len(subset) // 2} pairs; "
                  f"max |kernel - official| = {float(np.abs(theirs - ours).max()):.2e}")
        if family == "causal":
            subset = inputs[: 2 * args.reference_pairs]
            scoring.reference_scores(model, params, subset, variant, tokenizer.mask_id)  # compiles
            slow, ref_seconds = peak_and_time(scoring.reference_scores, model, params, subset, variant,
                                              tokenizer.mask_id)
            ref_flops = forward_flops(model.config, units[: len(subset)], sum(units[: len(subset)]) - len(subset),
                                      causal=True)
            max_diff = float(np.abs(np.asarray(slow) - fast[: len(subset)]).max())
            print(f"reference: {args.reference_pairs / ref_seconds:.1f} pairs/s ({args.reference_pairs} pairs); "
                  f"useful {ref_flops / ref_seconds / 1e9:.1f} GFLOP/s; max |kernel - reference| = {max_diff:.2e}")
            ratio = rates[family] / (args.reference_pairs / ref_seconds)
            reference_efficiency = ref_flops / ref_seconds
    conditions.report()
    peak, idle = conditions.run_peak, conditions.best_peak
    print(f"reference_useful_flops_vs_measured_peak: {reference_efficiency / peak:.2f}")
    print(f"pll_useful_flops_vs_measured_peak: {flops_per_s['mlm'] / peak:.2f}")
    print(f"useful_flops_vs_measured_peak: {flops_per_s['causal'] / peak:.2f}")
    print(f"pll_useful_flops_vs_idle_peak: {flops_per_s['mlm'] / idle:.2f}")
    print(f"useful_flops_vs_idle_peak: {flops_per_s['causal'] / idle:.2f}")
    print(f"kernel_over_reference: {ratio:.1f}")
    for variant, value in official.items():
        print(f"kernel_over_official_{variant}: {value:.1f}")


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
