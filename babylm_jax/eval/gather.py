"""Several runs' results side by side, as the official `pipeline.py gather` (with its `--export`).

    python -m babylm_jax.evaluate --gather RUN [RUN ...] [--output DIR]

A RUN is a results.json, a folder holding one, or a training workdir (its eval/results.json).
Prints one table (a row per run, a column per task, values 0..1, and the mean over the tasks
a run has), writes it as DIR/gather.csv and DIR/gather.md, and DIR/leaderboard_<run>.json per
run in the official leaderboard shape (`{"zhoblimp": {"accuracy": 0.73}, ...}`, values 0..1,
tasks without a result omitted).
"""
from __future__ import annotations

import itertools
import csv
import io
import json
import math
import pathlib
from typing import Mapping, Sequence

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write_text
from babylm_jax.core.jsonl import read_json
from babylm_jax.tasks import registry as tasks_lib

Results = dict[str, dict[str, float]]  # task -> {metric: value}


def results_file(run: str | pathlib.Path) -> pathlib.Path:
    """The results.json of RUN (a file, or a folder holding results.json or eval/results.json); an error if none."""
    run = pathlib.Path(run)
    if run.is_file():
        return run
    found = rundir.find_results(run)
    if found is None:
        raise FileNotFoundError(f"--gather {run}: no {rundir.RESULTS} or {rundir.EVAL_RESULTS} there")
    return found


def read_checked_results(path: pathlib.Path) -> Results:
    """A results.json in the official shape, checked (task -> {metric: number})."""
    data = read_json(path, "rerun evaluate to rewrite it, or leave the run out")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of task -> {{metric: value}}")
    for task, values in data.items():
        if not isinstance(values, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            raise ValueError(f"{path}: task {task!r} must map metric names to numbers, got {values!r}")
    return {task: {k: float(v) for k, v in values.items()} for task, values in data.items()}


def run_names(paths: Sequence[pathlib.Path]) -> list[str]:
    """A short unique name per results file: its run folder's name (the workdir above eval/), longer if needed."""
    def folder(path: pathlib.Path) -> pathlib.Path:
        parent = path.parent
        return parent.parent if parent.name == "eval" else parent

    parts = [folder(p).resolve().parts for p in paths]
    depths = [1] * len(paths)
    while True:
        names = ["/".join(part[-d:]) for part, d in zip(parts, depths)]
        clashing = [i for i, n in enumerate(names) if names.count(n) > 1 and depths[i] < len(parts[i])]
        if not clashing:
            return names
        for i in clashing:
            depths[i] += 1


def _task_order(runs: Mapping[str, Results]) -> list[str]:
    present = {task for results in runs.values() for task in results}
    known = [t for t in tasks_lib.TASKS if t in present]
    return known + sorted(present - set(known))


def _value(results: Results, task: str) -> float | None:
    values = results.get(task)
    if not values:
        return None
    metric = tasks_lib.TASKS[task].metric if task in tasks_lib.TASKS else next(iter(values))
    return values.get(metric, next(iter(values.values())))


def table(runs: Mapping[str, Results]) -> tuple[list[str], list[list[object]]]:
    """(header, rows): run, each task's official value (None when missing), mean over present tasks, count."""
    order = _task_order(runs)
    rows = []
    for name, results in runs.items():
        values = [_value(results, task) for task in order]
        present = [v for v in values if v is not None]
        rows.append([name, *values, sum(present) / len(present) if present else None, len(present)])
    return ["run", *order, "mean", "tasks"], rows


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def markdown(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


def leaderboard_entry(results: Results) -> Results:
    """The official leaderboard shape: task -> {official metric: value}, in task order, missing tasks omitted."""
    entry = {}
    for task in _task_order({"run": results}):
        value = _value(results, task)
        if value is not None:
            metric = tasks_lib.TASKS[task].metric if task in tasks_lib.TASKS else next(iter(results[task]))
            entry[task] = {metric: value}
    return entry


def gather(run_paths: Sequence[str | pathlib.Path], output: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Reads every run, writes gather.csv, gather.md and leaderboard_<run>.json under `output`; returns the paths."""
    files = [results_file(p) for p in run_paths]
    runs = dict(zip(run_names(files), (read_checked_results(f) for f in files)))
    header, rows = table(runs)
    output = pathlib.Path(output)
    written = {"csv": output / "gather.csv", "markdown": output / "gather.md"}
    atomic_write_text(written["csv"], csv_text(header, rows))
    atomic_write_text(written["markdown"], markdown(header, rows))
    for name, results in runs.items():
        path = output / f"leaderboard_{name.replace('/', '_')}.json"
        atomic_write_text(path, json.dumps(leaderboard_entry(results), indent=2, ensure_ascii=False) + "\n")
        written[f"leaderboard {name}"] = path
    print(markdown(header, rows), end="")
    return written


COMMAND = cli.Command("evaluate --gather", __doc__)
_OUTPUT = flags.DEFINE_string("output", "gathered", "Folder for gather.csv, gather.md, leaderboard_<run>.json.",
                              flag_values=COMMAND.flags)


def main(argv: Sequence[str]) -> dict[str, pathlib.Path]:
    """`argv`: what follows --gather, RUN [RUN ...] (a results.json, or a folder holding one or eval/results.json),
    then options in the commands' grammar (`--output DIR`)."""
    runs = list(itertools.takewhile(lambda arg: not arg.startswith("-"), argv))
    COMMAND.parse([COMMAND.name, *argv[len(runs):]])
    if not runs:
        raise cli.UserError("--gather needs at least one RUN: a results.json, or a folder holding one")
    written = gather(runs, _OUTPUT.value)
    print(f"[gather] wrote {', '.join(str(p) for p in written.values())}")
    return written
