"""One evaluate command's work: score loaded checkpoints on the chosen tasks and write the results.

    evaluation = Evaluation(workdir, data_dir, specs, skipped, settings, config_record)
    results, written = evaluate_checkpoint(loaded, evaluation, output)   # results.json, details, report
    evaluate_milestones(steps, run_step, output)                          # one folder per step, curves

`python -m babylm_jax.evaluate` parses the options, loads each checkpoint and calls these.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
from typing import Any, Callable, Sequence

from babylm_jax.core import rundir
from babylm_jax.core.families import family_spec
from babylm_jax.core.stops import Stopped
from babylm_jax.config import finetune_protocols as protocols
from babylm_jax.eval import milestone_curves, runner
from babylm_jax.eval.zero_shot import scoring
from babylm_jax.eval import results as results_lib
from babylm_jax.eval.run_log import RunLog
from babylm_jax.config.evaluation import EvalSettings
from babylm_jax.eval.loaded import LoadedModel
from babylm_jax.tasks import layout
from babylm_jax.tasks.registry import TaskSpec, get_task


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
    names = {field: key for key, field in protocols.KEYS.items()}
    return {task: {names[f]: getattr(settings.finetune[task], f) for f in protocols.KEYS.values()}
            for task in tasks if task in settings.finetune}


def write_finetune_config(path: pathlib.Path, settings: EvalSettings, family: str) -> pathlib.Path:
    """The official config.yaml that makes the pipeline fine-tune as this evaluation did."""
    used = {task: {f: getattr(settings.finetune[task], f) for f in protocols.KEYS.values()}
            for task in protocols.OFFICIAL_TASKS}
    return protocols.write_config(path, used, backend=family_spec(family).official_backend)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What each checkpoint of one evaluate command is scored on, and how."""

    workdir: pathlib.Path
    data_dir: pathlib.Path
    specs: Sequence[TaskSpec]
    skipped: dict[str, str]  # task -> why it is not run
    settings: EvalSettings
    config_record: dict[str, Any]  # the settings' config file and overrides, for the details


def evaluate_checkpoint(loaded: LoadedModel, evaluation: Evaluation,
                        output: pathlib.Path) -> tuple[dict[str, results_lib.TaskResult], dict[str, pathlib.Path]]:
    """Scores one loaded checkpoint and writes results.json (and the rest) at `output`. When a task
    failed or a signal stopped the evaluation, the finished tasks are written first (when none
    finished, nothing is), then the first failure or the stop is raised."""
    settings, specs = evaluation.settings, evaluation.specs
    settings.check_model(loaded.model.config, [spec.name for spec in specs])
    results, failed, stopped = runner.run_registry_tasks(loaded, evaluation.data_dir, specs, settings)
    not_run = {spec.name: f"not run: {stopped}" for spec in specs
               if stopped is not None and spec.name not in results and spec.name not in failed}
    written = _write_checkpoint_results(loaded, evaluation, output, results, failed, not_run) if results else {}
    if stopped is not None:
        kept = (f"the results of {', '.join(results)} are written to {written['results']}" if results
                else "no task had finished, so no results are written")
        raise Stopped(stopped.signum, f"{stopped}; {kept}; run the same command to score every task")
    if failed:  # the finished tasks are written; now the first failure ends the command as it would have
        kept = "the others' results are written" if results else "nothing was scored, so no results are written"
        print(f"[evaluate] {len(failed)} task(s) failed ({', '.join(failed)}); {kept}", flush=True)
        raise next(iter(failed.values()))
    return results, written


def _write_checkpoint_results(loaded: LoadedModel, evaluation: Evaluation, output: pathlib.Path,
                              results: dict[str, results_lib.TaskResult], failed: dict[str, Exception],
                              not_run: dict[str, str]) -> dict[str, pathlib.Path]:
    """Writes results.json, the details, the report and config.yaml; beside earlier results
    (`record_path`) when the evaluation is incomplete (`failed` or `not_run` tasks)."""
    settings, data_dir = evaluation.settings, evaluation.data_dir
    metadata = run_metadata(loaded, settings, workdir=str(evaluation.workdir), data_dir=str(data_dir),
                            data_layout=layout.detect(data_dir), **evaluation.config_record)
    reasons = {name: " ".join(f"{type(error).__name__}: {error}".split()) for name, error in failed.items()}
    target = results_lib.record_path(output, complete=not failed and not not_run)
    if target != output:
        print(f"[evaluate] {len(failed) + len(not_run)} task(s) failed or not run: the earlier results at {output} "
              f"stay as they are; this evaluation's go to {target.parent}", flush=True)
    finetuned = finetune_record(settings, [spec.name for spec in evaluation.specs if spec.name not in not_run])
    if finetuned:
        yaml_path = write_finetune_config(target.parent / "config.yaml", settings, loaded.model.config.family)
        metadata.update(finetune_protocol=settings.finetune_protocol or "configs (finetune.*)",
                        finetune_config_yaml=str(yaml_path), finetune_settings=finetuned)
    written = results_lib.write_results(target, results, metadata, {**evaluation.skipped, **not_run}, reasons)
    print(results_lib.format_table(results))
    print(f"[evaluate] wrote {written['results']}, {written['details'].name}, {written['report'].name}")
    return written


def chosen_milestones(workdir: str | pathlib.Path, option: str) -> list[int]:
    """The steps `--milestones` names ("all": every milestone checkpoint and the last one) among the
    checkpoints in `workdir` (a local folder or a remote workdir's URL)."""
    found = rundir.checkpoint_steps(str(workdir))  # step -> milestones/ or checkpoints/
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
                     **{name: r.values[get_task(name).metric] for name, r in results.items()}})
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
