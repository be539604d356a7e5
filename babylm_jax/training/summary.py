"""The end of a run: its summary (summary.json, the writers' run summary, the table) and where its outputs are.

    summary = run_summary(run, logger, evaluator, last_step, wall, programs)
    write_summary(run, writer, summary)   # process 0: summary.json, learning_curves.png, the table, the outputs
"""
from __future__ import annotations

import json
import math
import os
import shlex

from etils import epath

from babylm_jax.core import remote, rundir, writers
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.core.remote import RunPlace
from babylm_jax.model.transformer import count_params
from babylm_jax.training.compiled import StepPrograms
from babylm_jax.training.in_run_eval import RunEvaluator
from babylm_jax.training.metrics import StepLogger, plot_learning_curves
from babylm_jax.training.run import Run


def run_summary(run: Run, logger: StepLogger, evaluator: RunEvaluator, last_step: int, wall: float,
                programs: StepPrograms) -> dict:
    return {
        "parameters": count_params(run.state.params),
        "steps": last_step,
        "tokens_seen": run.tokens_seen,
        "words_seen": run.words_seen,
        "final_train_loss": logger.history[-1]["loss"] if logger.history else math.nan,
        "final_eval_loss": evaluator.last_loss,
        "final_task_scores": evaluator.last_scores,
        "task_eval_seconds": evaluator.task_seconds,
        "sample_seconds": evaluator.sample_seconds,  # text samples at evals (train.sample_prompts)
        "sample_compile_seconds": evaluator.samples.program.seconds if evaluator.samples is not None else 0.0,
        "wall_time_s": wall,
        "train_seconds": logger.timer.total_seconds,  # completed steps only: no compiles, evals or checkpoints
        "compiles": programs.count,
        "compile_seconds": programs.seconds,
        "mean_tokens_per_s": logger.timer.tokens_per_s(),
        "mean_mfu": logger.mean_mfu(),
        "mfu_peak_source": logger.peak_source,
    }


def write_summary(run: Run, writer: writers.RunWriters, summary: dict) -> None:
    """summary.json, the writers' run summary (with budget.json), learning_curves.png, the table."""
    atomic_write_json(os.path.join(run.workdir, rundir.SUMMARY), summary)
    writer.summary({"summary": summary, "budget": _budget(run.workdir)})
    plot_learning_curves(run.workdir)
    print(format_summary(summary))
    print(format_outputs(run.place))


def _budget(workdir: str) -> dict:
    """budget.json of the run (prepare writes it), or {} when there is none."""
    path = os.path.join(workdir, rundir.BUDGET)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


RUN_OUTPUTS = (  # (path in the workdir, what it holds), listed at the end of a run when present
    (rundir.CHECKPOINTS, "checkpoints (params, optimizer, data iterator)"),
    (rundir.MILESTONES, "word-milestone checkpoints"),
    (rundir.METRICS, "training and eval metrics, one JSON line per log step"),
    (rundir.LEARNING_CURVES, "loss curves and task scores against words seen"),
    (rundir.SUMMARY, "this summary"),
    (rundir.BUDGET, "jieba word counts against the budget"),
    (rundir.TOKENIZER, "the tokenizer"),
    (rundir.CONFIG, "the resolved config"),
)


def format_outputs(place: RunPlace) -> str:
    """Where the run's outputs are, and the commands that take them further."""
    def exists(name: str) -> bool:  # checkpoints may be in a remote workdir, the rest is in this host's folder
        return (epath.Path(place.checkpoints_at if name in remote.REMOTE_ONLY else place.local) / name).exists()

    rows = [(f"{place.workdir}/{name}", what) for name, what in RUN_OUTPUTS if exists(name)]
    width = max((len(path) for path, _ in rows), default=0)
    return "\n".join(
        ["Outputs"] + [f"  {path.ljust(width)}  {what}" for path, what in rows]
        + ["Next", f"  python -m babylm_jax.evaluate --workdir {shlex.quote(place.workdir)} --data_dir DATA_DIR",
           f"  python -m babylm_jax.export --workdir {shlex.quote(place.workdir)} "
           f"--output {shlex.quote(os.path.join(place.local, 'hf'))}"])  # quoted: they paste as printed


def format_summary(s: dict) -> str:
    """The end-of-run summary as a small readable table."""
    rows = [
        ("parameters", f"{s['parameters']:,}"),
        ("steps", f"{s['steps']:,}"),
        ("tokens seen", f"{s['tokens_seen']:,}"),
        ("jieba words seen", f"{s['words_seen']:,.0f}"),
        ("final train loss", f"{s['final_train_loss']:.4f}"),
        ("final eval loss", "none: no held-out text" if s["final_eval_loss"] is None
         else f"{s['final_eval_loss']:.4f}"),
        ("wall time", f"{s['wall_time_s']:.1f} s ({s['train_seconds']:.1f} s in steps; {s['compiles']} "
                      f"compiles, {s['compile_seconds']:.1f} s)"),
        ("mean tokens/s", f"{s['mean_tokens_per_s']:,.0f} (tokens over time in steps)"),
        ("mean MFU", f"{s['mean_mfu']:.3f} (peak: {s['mfu_peak_source']})"),
    ]
    rows += [(f"{name} (sample)", f"{acc:.4f}") for name, acc in s.get("final_task_scores", {}).items()]
    if s.get("final_task_scores"):
        rows.append(("task scoring time", f"{s['task_eval_seconds']:.1f} s"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(["Run summary"] + [f"  {k.ljust(width)}  {v}" for k, v in rows])
