"""Scores a checkpoint on the challenge's tasks and writes results.json plus a report.

    python -m babylm_jax.evaluate --workdir runs/base --data_dir ../shared/data \\
        --tasks zhoblimp,hanzi_pinyin --output runs/base/eval/results.json [--step N | --milestones all] [--limit N] \\
        [--config configs/eval.py] [--config.scoring.within_word_l2r=True] [--config.finetune.epochs=3]

Settings (scoring, fine-tuning per task, fMRI) come from `--config` (default configs/eval.py)
with `--config.a.b=v` overrides, checked before the model is loaded; an official pipeline
config.yaml sets the fine-tuning protocol with `--config.finetune.protocol=path/config.yaml`
(or "official", "eval_finetuning_sh"), and the config.yaml reproducing the settings used is
written beside results.json.

    python -m babylm_jax.evaluate --gather RUN [RUN ...] [--output DIR]

compares finished runs in one table (gather.csv, gather.md, leaderboard_<run>.json).

`--config.log_to_run=True` also logs the results to the run's TensorBoard folder and W&B run
(`train.writers`; `eval.run_log`). `--tasks all` runs every
task whose files are present and says which were skipped and why. Beside results.json it
writes results_details.json, report.md and per-task PNGs. A user error is one line and exit
status 2 (`babylm_jax.config.cli`).
"""
from __future__ import annotations

import datetime
import os
import pathlib
from typing import Any, Callable, Sequence

from absl import flags
from ml_collections import config_flags

from babylm_jax.config import cli
from babylm_jax.core import outputs, rundir
from babylm_jax.core.vocab import OFFICIAL_BACKEND
from babylm_jax.tasks import layout
from babylm_jax.eval import finetune_config, milestone_curves, runner
from babylm_jax.eval import results as results_lib
from babylm_jax.eval import scoring
from babylm_jax.eval.run_log import RunLog
from babylm_jax.tasks import registry as tasks_lib
from babylm_jax.eval.settings import DEFAULT_CONFIG, EvalSettings
from babylm_jax.model.loaded import LoadedModel

COMMAND = cli.Command("evaluate", __doc__)
_CONFIG = COMMAND.config("config", str(DEFAULT_CONFIG), "Evaluation settings (ml_collections config file).")
_CHECKPOINT = cli.CheckpointFlags.define(COMMAND, "Score")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "One folder per task, or the official pipeline's "
                                "evaluation_data/ as downloaded.", flag_values=COMMAND.flags)
_TASKS = flags.DEFINE_string("tasks", "all", "'all' or comma-separated names: " + ", ".join(tasks_lib.TASKS),
                             flag_values=COMMAND.flags)
_OUTPUT = flags.DEFINE_string("output", None, "results.json path (default <workdir>/eval/results.json).",
                              flag_values=COMMAND.flags)
_LIMIT = flags.DEFINE_integer("limit", None, "Quick runs: the first N items of each minimal-pair task, N evenly "
                              "spaced examples per fine-tuning split.", flag_values=COMMAND.flags)
_MILESTONES = flags.DEFINE_string(
    "milestones", "", "'all' or comma-separated steps: score each word-milestone checkpoint (and the last) on "
    "--tasks; writes one results folder per step and milestone_curves.{json,md,png} beside --output.",
    flag_values=COMMAND.flags)
flags.mark_flags_as_required(["data_dir"], flag_values=COMMAND.flags)


def run_metadata(loaded: LoadedModel, settings: EvalSettings, **more: Any) -> dict[str, Any]:
    """What results_details.json and report.md say about the run and the evaluation."""
    tokenizer = loaded.tokenizer
    family = loaded.model.config.family
    return {
        **more,
        "checkpoint_step": int(loaded.step),
        "tokens_seen": int(loaded.tokens_seen),
        "words_seen": float(loaded.words_seen),
        "ema_params": bool(loaded.used_ema),
        "model_family": family,
        "tokenizer": f"{type(tokenizer).__name__} (vocab {tokenizer.vocab_size})",
        "scoring": scoring.scoring_name(family, settings.scoring.within_word_l2r),
        "limit": settings.limit,
        "evaluated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def finetune_record(settings: EvalSettings, tasks: Sequence[str]) -> dict[str, Any]:
    """The fine-tuning settings used, per task that ran, in config.yaml's terms (for the details and report)."""
    names = {field: key for key, field in finetune_config.KEYS.items()}
    return {task: {names[f]: getattr(settings.finetune[task], f) for f in finetune_config.KEYS.values()}
            for task in tasks if task in settings.finetune}


def write_finetune_config(path: pathlib.Path, settings: EvalSettings, family: str) -> pathlib.Path:
    """The official config.yaml that makes the pipeline fine-tune as this evaluation did."""
    used = {task: {f: getattr(settings.finetune[task], f) for f in finetune_config.KEYS.values()}
            for task in finetune_config.OFFICIAL_TASKS}
    return finetune_config.write_config(path, used, backend=OFFICIAL_BACKEND[family])


def evaluate_checkpoint(
    loaded: LoadedModel, workdir: pathlib.Path, data_dir: pathlib.Path, specs: Sequence[tasks_lib.TaskSpec],
    skipped: dict[str, str], settings: EvalSettings, output: pathlib.Path,
) -> tuple[dict[str, results_lib.TaskResult], dict[str, pathlib.Path]]:
    """Scores one loaded checkpoint and writes results.json (and the rest) at `output`; when a
    task failed, the finished ones are written first and the first failure is raised."""
    settings.check_model(loaded.model.config, [spec.name for spec in specs])
    results, failed = runner.evaluate(loaded, data_dir, specs, settings)
    metadata = run_metadata(loaded, settings, workdir=str(workdir), data_dir=str(data_dir),
                            data_layout=layout.detect(data_dir), config=COMMAND.flags["config"].config_filename,
                            config_overrides=config_flags.get_override_values(COMMAND.flags["config"]))
    reasons = {name: " ".join(f"{type(error).__name__}: {error}".split()) for name, error in failed.items()}
    target = results_lib.record_path(output, complete=not failed)
    if target != output:
        print(f"[evaluate] {len(failed)} task(s) failed: the earlier results at {output} stay as they are; this "
              f"evaluation's go to {target.parent}", flush=True)
    finetuned = finetune_record(settings, [spec.name for spec in specs])
    if finetuned:
        yaml_path = write_finetune_config(target.parent / "config.yaml", settings, loaded.model.config.family)
        metadata.update(finetune_protocol=settings.finetune_protocol or "configs (finetune.*)",
                        finetune_config_yaml=str(yaml_path), finetune_settings=finetuned)
    written = results_lib.write_results(target, results, metadata, skipped, reasons)
    print(results_lib.format_table(results))
    print(f"[evaluate] wrote {written['results']}, {written['details'].name}, {written['report'].name}")
    if failed:  # the finished tasks are written; now the first failure ends the command as it would have
        error = next(iter(failed.values()))
        print(f"[evaluate] {len(failed)} task(s) failed ({', '.join(failed)}); the others' results are written",
              flush=True)
        raise error
    return results, written


def chosen_milestones(workdir: pathlib.Path, option: str) -> list[int]:
    """The steps `--milestones` names ("all": every milestone checkpoint and the last one)."""
    from babylm_jax.training.checkpoint import checkpoint_steps

    found = checkpoint_steps(str(workdir))  # step -> milestones/ or checkpoints/
    if not found:
        raise FileNotFoundError(f"no checkpoint in {workdir} (looked in milestones/ and checkpoints/)")
    available = sorted({s for s, root in found.items() if root.endswith(rundir.MILESTONES)} | {max(found)})
    if option == "all":
        return available
    try:
        steps = [int(s) for s in option.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--milestones {option!r}: give 'all' or comma-separated checkpoint steps") from None
    missing = sorted(set(steps) - set(available))
    if missing:
        raise FileNotFoundError(f"--milestones: no checkpoint for step(s) {missing} in {workdir}; available: {available}")
    return steps


def evaluate_milestones(steps: Sequence[int], run_step: Callable, output: pathlib.Path,
                        run_log: RunLog | None = None) -> dict[str, pathlib.Path]:
    """Runs `run_step(step, output_of_step)` for each step (results in `step_<N>/` beside `output`),
    then writes the curves and a table across the steps beside `output` (and to `run_log`)."""
    rows = []
    for step in steps:
        print(f"[evaluate] milestone checkpoint {step} ({len(rows) + 1} of {len(steps)})", flush=True)
        loaded, results, _ = run_step(step, output.parent / f"step_{step}" / output.name)
        rows.append({"step": step, "words_seen": float(loaded.words_seen),
                     **{name: r.values[tasks_lib.get_task(name).metric] for name, r in results.items()}})
    paths = milestone_curves.write_milestone_curves(rows, output.parent)
    if run_log is not None:
        run_log.milestones(rows)
    print(paths["md"].read_text())
    print(f"[evaluate] wrote {', '.join(str(p) for p in paths.values())}")
    return paths


def check_output(output: pathlib.Path) -> pathlib.Path:
    """`--output` must be a file path whose folder exists or can be created, writable; nothing is created."""
    if output.is_dir():
        raise IsADirectoryError(f"--output {output} is a folder; give the path of results.json, e.g. {output}/results.json")
    existing = output.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise PermissionError(f"--output {output}: {existing} is not a writable folder; choose another --output")
    return output


def main(argv: Sequence[str]) -> dict[str, pathlib.Path]:
    """Parses `argv` (program name first), evaluates, writes the results; returns the paths written.

    `--gather RUN [RUN ...] [--output DIR]` first instead compares finished runs (`eval.gather`).
    """
    if len(argv) > 1 and argv[1] == "--gather":
        from babylm_jax.eval import gather

        return gather.main(list(argv[2:]))
    COMMAND.parse(argv)
    settings = EvalSettings.from_config(_CONFIG.value, _LIMIT.value)
    workdir, data_dir = pathlib.Path(_CHECKPOINT.workdir.value), pathlib.Path(_DATA_DIR.value)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data_dir {data_dir} is not a directory")
    output = check_output(pathlib.Path(_OUTPUT.value) if _OUTPUT.value else workdir / rundir.EVAL_RESULTS)
    outputs.check_output(output, "--output", run=workdir, data={"--data_dir": data_dir})
    with outputs.output_lock(output, "evaluate"):
        outputs.remove_temporaries(output.parent)  # of an evaluation killed mid-write
        return _evaluate(workdir, data_dir, output, settings)


def _evaluate(workdir: pathlib.Path, data_dir: pathlib.Path, output: pathlib.Path,
              settings: EvalSettings) -> dict[str, pathlib.Path]:
    """Selects the tasks, loads the checkpoint(s) and writes the results (under the output's lock)."""
    print(f"[evaluate] data: {layout.describe(data_dir)}", flush=True)
    specs, skipped = tasks_lib.select_tasks(_TASKS.value, data_dir)
    for name, reason in skipped.items():
        print(f"[evaluate] skipped {name}: {reason}", flush=True)
    if not specs:
        raise FileNotFoundError(f"no task has its files under {data_dir}; nothing to evaluate")
    from babylm_jax.training.checkpoint import load_config, load_for_eval  # the heavy import, after the cheap checks

    run_log = RunLog(workdir, load_config(str(workdir))) if settings.log_to_run else None
    metrics = {spec.name: spec.metric for spec in specs}

    def run_step(step: int | None, step_output: pathlib.Path) -> tuple[LoadedModel, dict, dict]:
        loaded = load_for_eval(workdir, step=step, use_ema=_CHECKPOINT.ema())
        results, written = evaluate_checkpoint(loaded, workdir, data_dir, specs, skipped, settings, step_output)
        if run_log is not None:
            run_log.checkpoint(int(loaded.step), float(loaded.words_seen), results, metrics)
        return loaded, results, written

    try:
        if _MILESTONES.value:
            return evaluate_milestones(chosen_milestones(workdir, _MILESTONES.value), run_step, output, run_log)
        return run_step(_CHECKPOINT.step.value, output)[2]
    finally:
        if run_log is not None:
            run_log.close()


if __name__ == "__main__":
    COMMAND.run(main)
