"""The official pipeline's own scorer and fine-tuning trainer, run as it runs them, with their phases timed.

    # in the official code's python (torch, transformers, scikit-learn), from any directory:
    python experiments/benchmarks/official_pipeline_timing.py zero_shot --official DIR --model EXPORT \
        --data_path ZHOBLIMP_DIR --output_dir OUT/official --out OUT/official_zhoblimp.json
    python experiments/benchmarks/official_pipeline_timing.py finetune --official DIR --model EXPORT \
        --task afqmc --train_data T.jsonl --valid_data V.jsonl --epochs 1 --output_dir OUT/official --out OUT/official_afqmc.json

DIR is a copy of SiyuanSong2004/chinese-babylm-eval-pipeline at 2c8a2d9 (its evaluation_pipeline/
package). `zero_shot` runs `evaluation_pipeline.sentence_zero_shot.run` with the arguments its
pipeline.py passes for a causal model (`_build_zero_shot_cmd`: backend causal, --save_predictions,
its default batch of 64), in this process, timing the model load, the data loading and
`compute_results` (the scoring); `finetune` runs `evaluation_pipeline.finetune.run` as `__main__`
with `_build_finetune_cmd`'s arguments for a causal model (--causal --take_final, batch 32, lr 3e-5,
max length 128, seed 42; `--epochs` and the given files), timing the Trainer's set-up, each
`train_epoch`, each `evaluate` and the prediction. Writes the phases, the counts and the rates
(pairs/s; training and evaluation examples/s) as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import runpy
import sys
import time
from typing import Any, Callable

PHASES: dict[str, list[float]] = {}


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, adding each call's seconds to PHASES[name] (CUDA synchronised at both ends)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _sync()
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _sync()
            PHASES.setdefault(name, []).append(time.perf_counter() - start)
    return wrapper


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def zero_shot(args: argparse.Namespace) -> dict[str, Any]:
    from evaluation_pipeline.sentence_zero_shot import run

    sizes = {}
    get_dataloader = run.get_dataloader

    def counted_dataloader(run_args: Any) -> Any:
        loader = get_dataloader(run_args)
        sizes["pairs"] = len(loader.dataset)
        return loader

    run.get_model = timed("model_load", run.get_model)
    run.get_dataloader = timed("data", counted_dataloader)
    run.compute_results = timed("scoring", run.compute_results)
    sys.argv = ["run.py", "--model_path_or_name", args.model, "--backend", "causal", "--task", "zhoblimp",
                "--data_path", args.data_path, "--output_dir", args.output_dir, "--save_predictions"]
    start = time.perf_counter()
    run.main()
    total = time.perf_counter() - start
    report = next(pathlib.Path(args.output_dir).rglob("best_temperature_report.txt")).read_text().splitlines()
    accuracy = float(report[report.index("### AVERAGE ACCURACY") + 1]) / 100
    pairs, scoring = sizes["pairs"], sum(PHASES["scoring"])
    return {"pairs": pairs, "seconds_total": round(total, 2), "seconds": {k: round(sum(v), 2) for k, v in PHASES.items()},
            "pairs_per_s_scoring": round(pairs / scoring, 1), "pairs_per_s_total": round(pairs / total, 1),
            "accuracy_macro_uid": accuracy, "batch_size": 64}


def finetune(args: argparse.Namespace) -> dict[str, Any]:
    from evaluation_pipeline.finetune import trainer

    counts: dict[str, int] = {}
    init = trainer.Trainer.__init__

    def counted_init(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        counts["train"] = len(self.train_dataloader) * self.train_dataloader.batch_size  # drop_last
        counts["valid"] = len(self.valid_dataloader.dataset)
        counts["predict"] = len(self.predict_dataloader.dataset)

    trainer.Trainer.__init__ = timed("setup", counted_init)
    for method in ("train_epoch", "evaluate", "predict_classification"):
        setattr(trainer.Trainer, method, timed(method, getattr(trainer.Trainer, method)))
    sys.argv = ["run.py", "--model_name_or_path", args.model, "--train_data", args.train_data,
                "--valid_data", args.valid_data, "--predict_data", args.valid_data, "--task", args.task,
                "--num_labels", str(args.num_labels), "--batch_size", "32", "--learning_rate", "3e-05",
                "--num_epochs", str(args.epochs), "--sequence_length", "128", "--results_dir", args.output_dir,
                "--metrics", "accuracy", "--metric_for_valid", "accuracy", "--seed", "42", "--causal", "--take_final"]
    start = time.perf_counter()
    runpy.run_module("evaluation_pipeline.finetune.run", run_name="__main__", alter_sys=True)
    total = time.perf_counter() - start
    train_s, eval_s = PHASES["train_epoch"], PHASES["evaluate"]
    results = next(pathlib.Path(args.output_dir).rglob("results.txt")).read_text()
    return {"task": args.task, "epochs": args.epochs, "examples": counts, "seconds_total": round(total, 2),
            "seconds": {k: [round(x, 2) for x in v] for k, v in PHASES.items()},
            "train_examples_per_s": round(counts["train"] * len(train_s) / sum(train_s), 1),
            "eval_examples_per_s": round(counts["valid"] * len(eval_s) / sum(eval_s), 1),
            "setup_s": round(sum(PHASES["setup"]), 2), "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("zero_shot", "finetune"))
    parser.add_argument("--official", required=True, help="the official code's folder (holds evaluation_pipeline/)")
    parser.add_argument("--model", required=True, help="the exported model's folder")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--out", required=True, help="the JSON to write")
    parser.add_argument("--data_path", help="zero_shot: the folder of ZhoBLiMP .jsonl files")
    parser.add_argument("--task", default="afqmc")
    parser.add_argument("--num_labels", type=int, default=2)
    parser.add_argument("--train_data")
    parser.add_argument("--valid_data")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    official = pathlib.Path(args.official).resolve()
    if not (official / "evaluation_pipeline").is_dir():
        sys.exit(f"--official {official}: no evaluation_pipeline/ there (a copy of the official code at 2c8a2d9)")
    sys.path.insert(0, str(official))
    result = zero_shot(args) if args.mode == "zero_shot" else finetune(args)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
