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
status 2 (`babylm_jax.config.cli`). A failed task, or a stop signal (SIGTERM, SIGINT, SIGHUP) in a task, leaves the
finished tasks written (none finished: no results file) and the command exits non-zero: the
failure's status, or 128 + the signal's number (143, 130).
"""
from __future__ import annotations

import pathlib
from typing import Sequence

from absl import flags
from ml_collections import config_flags

from babylm_jax.config import cli
from babylm_jax.core import outputs, remote, rundir
from babylm_jax.eval import session
from babylm_jax.eval.run_log import RunLog
from babylm_jax.config.evaluation import DEFAULT_CONFIG, EvalSettings
from babylm_jax.eval.loaded import LoadedModel
from babylm_jax.tasks import layout
from babylm_jax.tasks import registry as tasks_lib

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


def main(argv: Sequence[str]) -> dict[str, pathlib.Path]:
    """Parses `argv` (program name first), evaluates, writes the results; returns the paths written.

    `--gather RUN [RUN ...] [--output DIR]` first instead compares finished runs (`eval.gather`).
    """
    if len(argv) > 1 and argv[1] == "--gather":
        from babylm_jax.eval import gather

        return gather.main(list(argv[2:]))
    COMMAND.parse(argv)
    settings = EvalSettings.from_config(_CONFIG.value, _LIMIT.value)
    for option, value in (("--data_dir", _DATA_DIR.value), ("--output", _OUTPUT.value or "")):
        rundir.local_path(value, option)
    data_dir = pathlib.Path(_DATA_DIR.value)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data_dir {data_dir} is not a directory")
    place = remote.readable_run(_CHECKPOINT.workdir.value, rundir.READ_BY_EVALUATION)
    if place.mirror is not None:
        if settings.log_to_run:
            raise ValueError(f"config key log_to_run=True: the run's writers of remote workdir {place.workdir} are its "
                             "train's; evaluate it without log_to_run (results go to --output)")
        print(f"[evaluate] {place.workdir}: checkpoints read from there; its config and tokenizer from this host's "
              f"copy {place.local}", flush=True)
    workdir = pathlib.Path(place.local)
    output = session.check_output(pathlib.Path(_OUTPUT.value) if _OUTPUT.value else workdir / rundir.EVAL_RESULTS)
    outputs.check_output_path(output, "--output", run=workdir, data={"--data_dir": data_dir},
                              inside_run=rundir.EVAL_RESULTS)
    outputs.check_writable(output.parent, "--output")  # before the model is loaded
    with outputs.output_lock(output, "evaluate"):
        outputs.remove_temporaries(output.parent)  # of an evaluation killed mid-write
        with outputs.full_disk_errors(output.parent, "the results", lambda: "a few MB (results, details, report, "
                                      "predictions)", "free some space (or give --output on another disk) and run "
                                      "the same command"):
            return _evaluate(workdir, data_dir, output, settings, place.checkpoints_at)


def _evaluate(workdir: pathlib.Path, data_dir: pathlib.Path, output: pathlib.Path,
              settings: EvalSettings, checkpoints_at: str) -> dict[str, pathlib.Path]:
    """Selects the tasks, loads the checkpoint(s) and writes the results (under the output's lock)."""
    print(f"[evaluate] data: {layout.describe(data_dir)}", flush=True)
    specs, skipped = tasks_lib.select_tasks(_TASKS.value, data_dir)
    for name, reason in skipped.items():
        print(f"[evaluate] skipped {name}: {reason}", flush=True)
    if not specs:
        raise FileNotFoundError(f"no task has its files under {data_dir}; nothing to evaluate")
    from babylm_jax.training.checkpoints import load_for_eval  # the heavy import, after the cheap checks
    from babylm_jax.training.run_config import load_run_config

    run_log = RunLog(workdir, load_run_config(str(workdir)).train) if settings.log_to_run else None
    metrics = {spec.name: spec.metric for spec in specs}

    evaluation = session.Evaluation(workdir, data_dir, specs, skipped, settings, {
        "config": COMMAND.flags["config"].config_filename,
        "config_overrides": config_flags.get_override_values(COMMAND.flags["config"])})

    def run_step(step: int | None, step_output: pathlib.Path) -> tuple[LoadedModel, dict, dict]:
        loaded = load_for_eval(str(workdir), step=step, use_ema=_CHECKPOINT.ema(), checkpoints_at=checkpoints_at)
        results, written = session.evaluate_checkpoint(loaded, evaluation, step_output)
        if run_log is not None:
            run_log.checkpoint(int(loaded.step), float(loaded.words_seen), results, metrics)
        return loaded, results, written

    try:
        if _MILESTONES.value:
            steps = session.chosen_milestones(checkpoints_at, _MILESTONES.value)
            return session.evaluate_milestones(steps, run_step, output, run_log)
        return run_step(_CHECKPOINT.step.value, output)[2]
    finally:
        if run_log is not None:
            run_log.close()


if __name__ == "__main__":
    COMMAND.run(main)
