"""The grain pipeline on a large prepared corpus against what an H100 would consume (issue 38).

    python experiments/benchmarks/pipeline_at_scale.py --workdir /tmp/scale102/run \
        [--configs configs/causal_14m.py configs/hybrid_100m.py] [--batches 300]

`--workdir` is a run prepared by experiments/prepare_scale.py (its corpus, BPE tokenizer and token
cache). Each config keeps its own model and train sections (batch size, row length, family) and
takes the prepared run's data section (the corpus and tokenizer), so its batches come from that
cache; the vocabulary is the prepared tokenizer's (the FLOPs below use the config's own). A family
whose framing the cache lacks is tokenised first, untimed.

For each config: the seconds from the start (opening the prepared data: its checksums are read) to
the first batch, split into opening, building the pipeline (packing layout, eval batches) and the
first batch; then batches/s over `--batches` batches. The need: training FLOPs per step
(`training.metrics.train_flops_per_token` x batch x row length, at the config's vocabulary, at the
shortest rows of a row-length curriculum and the lowest masking rate: the most steps/s) over 45% of
the H100's dense bf16 peak (989 TFLOP/s) gives the steps/s an H100 would take. The last
line per config: `pipeline_over_h100_ratio: N` (goal > 1). With the run's conditions
(`conditions.py`: load, matmul peak).
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import time

from conditions import Conditions
from babylm_jax.config.files import load_config_file
from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import pipeline
from babylm_jax.corpus import preparation
from babylm_jax.training import metrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
H100_BF16_DENSE = 989e12
MFU = 0.45


def config_on_prepared(config_path: pathlib.Path, workdir: pathlib.Path):
    """`config_path`'s model and train sections with the prepared run's data section and vocabulary."""
    config = load_config_file(config_path)
    scale = load_config_file(ROOT / "configs" / "base.py")  # as prepare_scale.py's prepare command sets it
    scale.data.corpus = str(workdir.parent / "corpus")
    scale.data.tokenizer.kind = "bpe"
    scale.data.allow_over_budget = True
    own_vocab = config.model.vocab_size
    config.data = scale.data
    config.model.vocab_size = 8000
    return config, own_vocab


def h100_steps_per_s(config, vocab_size: int) -> float:
    """Steps/s an H100 at 45% MFU would train `config` at (its FLOPs with `vocab_size`), in its
    fastest phase: the batch's tokens are the same in every phase of a row-length curriculum (rows of
    `train.seq_len` are cut shorter), and the shortest rows' attention costs least."""
    run = RunConfig.from_config(config)
    model, train = dataclasses.replace(run.model, vocab_size=vocab_size), run.train
    tokens = train.batch_size * train.seq_len
    shortest = min([train.seq_len, *(length for _, length in train.seq_len_curriculum)])
    share = metrics.predicted_share(run, min(train.mask_rate, train.mask_rate_final))
    step_flops = tokens * metrics.train_flops_per_token(model, shortest, metrics.causal_share(run), share)
    return MFU * H100_BF16_DENSE / step_flops


def measure(config, workdir: pathlib.Path, batches: int) -> dict:
    run = RunConfig.from_config(config)
    preparation.prepare_corpus(run, workdir)  # tokenises for this family's framing where the cache lacks it
    start = time.perf_counter()
    prepared = preparation.prepare_corpus(run, workdir)
    opened = time.perf_counter()
    data = pipeline.build_train_data(run, workdir, prepared=prepared)
    built = time.perf_counter()
    batch = next(data.train_iterator)
    first = time.perf_counter()
    for _ in range(batches):
        batch = next(data.train_iterator)
    rate = batches / (time.perf_counter() - first)
    return {"open_s": opened - start, "build_s": built - opened, "first_batch_s": first - built,
            "to_first_batch_s": first - start, "batches_per_s": rate, "shape": list(batch["tokens"].shape),
            "train_rows": data.stats["train_rows"], "documents": prepared.tokens.num_documents,
            "tokens": int(len(prepared.tokens.tokens))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--configs", nargs="+", type=pathlib.Path,
                        default=[ROOT / "configs" / "causal_14m.py", ROOT / "configs" / "hybrid_100m.py"])
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    conditions = Conditions.start()
    results = {}
    for path in args.configs:
        config, own_vocab = config_on_prepared(path, args.workdir)
        conditions.probe()
        result = measure(config, args.workdir, args.batches)
        result["h100_steps_per_s"] = h100_steps_per_s(config, own_vocab)
        result["ratio"] = result["batches_per_s"] / result["h100_steps_per_s"]
        results[path.stem] = result
        print(f"{path.stem}: {result['documents']:,} documents, {result['tokens']:,} tokens, {result['train_rows']:,} rows "
              f"of {result['shape'][1]}; first batch {result['to_first_batch_s']:.1f} s after the start (open "
              f"{result['open_s']:.1f} s, build {result['build_s']:.1f} s, first batch {result['first_batch_s']:.2f} s); "
              f"{result['batches_per_s']:.1f} batches/s of {result['shape']}; an H100 at 45% MFU takes "
              f"{result['h100_steps_per_s']:.1f} steps/s", flush=True)
        print(f"pipeline_over_h100_ratio: {result['ratio']:.2f}", flush=True)
    conditions.probe()
    conditions.report()


if __name__ == "__main__":
    main()
