"""Scores a checkpoint on the challenge's tasks and writes results.json plus a report.

    python -m babylm_jax.evaluate --workdir runs/base --data_dir ../shared/data \\
        --tasks zhoblimp,hanzi_pinyin --output runs/base/eval/results.json [--step N] [--limit N]

`--tasks all` runs every task whose files are present and says which were skipped and why.
Beside results.json it writes results_details.json, report.md and per-task PNGs.
"""
from __future__ import annotations

import argparse
import datetime
import pathlib
import sys
from typing import Any, Sequence

from babylm_jax import cli
from babylm_jax.eval import layout
from babylm_jax.eval import results as results_lib
from babylm_jax.eval import tasks as tasks_lib


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m babylm_jax.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True, help="training run directory (checkpoints + tokenizer)")
    parser.add_argument("--data_dir", required=True,
                        help="one folder per task, or the official pipeline's evaluation_data/ as downloaded")
    parser.add_argument("--tasks", default="all", help="'all' or comma-separated names: " + ", ".join(tasks_lib.TASKS))
    parser.add_argument("--output", default=None, help="results.json path (default <workdir>/eval/results.json)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    parser.add_argument("--use_ema", choices=("auto", "yes", "no"), default="auto",
                        help="score EMA params ('auto': when the run kept them)")
    parser.add_argument("--limit", type=int, default=None, help="quick runs: the first N items of each minimal-pair task, N evenly spaced examples per fine-tuning split")
    parser.add_argument("--batch_size", type=int, default=tasks_lib.EvalOptions.batch_size, help="rows per scoring batch")
    parser.add_argument("--row_len", type=int, default=tasks_lib.EvalOptions.row_len, help="packed row length for scoring")
    parser.add_argument("--within_word_l2r", action="store_true", help="PLL variant for masked/hybrid models")
    parser.add_argument("--finetune_epochs", type=int, default=None, help="override the official epochs")
    parser.add_argument("--fmri_layer", type=int, default=None, help="hidden layer for fMRI features")
    parser.add_argument("--seed", type=int, default=tasks_lib.EvalOptions.seed)
    parser.add_argument("--extra", action="append", default=[], metavar="KEY=VALUE",
                        help="free-form option for a task runner (repeatable)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit <= 0:
        parser.error(f"--limit must be positive, got {args.limit}")
    for item in args.extra:
        if "=" not in item:
            parser.error(f"--extra {item!r}: expected KEY=VALUE")
    return args


def options_from_args(args: argparse.Namespace) -> tasks_lib.EvalOptions:
    return tasks_lib.EvalOptions(
        limit=args.limit,
        batch_size=args.batch_size,
        row_len=args.row_len,
        within_word_l2r=args.within_word_l2r,
        finetune_epochs=args.finetune_epochs,
        fmri_layer=args.fmri_layer,
        seed=args.seed,
        extra=dict(item.split("=", 1) for item in args.extra),
    )


def run_metadata(loaded: Any, options: tasks_lib.EvalOptions, **more: Any) -> dict[str, Any]:
    """What results_details.json and report.md say about the run and the evaluation."""
    tokenizer = loaded.tokenizer
    family = loaded.model.config.family
    scoring = {"causal": "causal_sum_logprob", "mlm": "pll", "hybrid": "mntp_pll"}[family]
    if family != "causal" and options.within_word_l2r:
        scoring += "_within_word_l2r"
    return {
        **more,
        "checkpoint_step": int(loaded.step),
        "tokens_seen": int(loaded.tokens_seen),
        "words_seen": float(loaded.words_seen),
        "ema_params": bool(loaded.used_ema),
        "model_family": family,
        "tokenizer": f"{type(tokenizer).__name__} (vocab {tokenizer.vocab_size})",
        "scoring": scoring,
        "limit": options.limit,
        "evaluated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def evaluate(
    loaded: Any,
    data_dir: str | pathlib.Path,
    specs: Sequence[tasks_lib.TaskSpec],
    options: tasks_lib.EvalOptions,
) -> dict[str, results_lib.TaskResult]:
    """Runs each task on the loaded model; returns name -> TaskResult in the given order."""
    results = {}
    for spec in specs:
        print(f"[evaluate] {spec.name} ({spec.track}) ...", flush=True)
        results[spec.name] = spec.run(loaded, data_dir, options)
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, pathlib.Path]:
    args = parse_args(argv)
    workdir, data_dir = pathlib.Path(args.workdir), pathlib.Path(args.data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data_dir {data_dir} is not a directory")
    print(f"[evaluate] data: {layout.describe(data_dir)}", flush=True)
    specs, skipped = tasks_lib.select_tasks(args.tasks, data_dir)
    for name, reason in skipped.items():
        print(f"[evaluate] skipped {name}: {reason}", flush=True)
    if not specs:
        raise FileNotFoundError(f"no task has its files under {data_dir}; nothing to evaluate")
    from babylm_jax.training.checkpoint import load_for_eval  # the heavy import, after the cheap checks

    use_ema = {"auto": None, "yes": True, "no": False}[args.use_ema]
    loaded = load_for_eval(workdir, step=args.step, use_ema=use_ema)
    options = options_from_args(args)
    results = evaluate(loaded, data_dir, specs, options)
    metadata = run_metadata(loaded, options, workdir=str(workdir), data_dir=str(data_dir),
                            data_layout=layout.detect(data_dir))
    output = pathlib.Path(args.output) if args.output else workdir / "eval" / "results.json"
    written = results_lib.write_results(output, results, metadata, skipped)
    print(results_lib.format_table(results))
    print(f"[evaluate] wrote {written['results']}, {written['details'].name}, {written['report'].name}")
    return written


if __name__ == "__main__":
    cli.report_errors("evaluate", main, sys.argv[1:])
