"""Task results and the files they become: results.json, results_details.json, report.md, PNGs.

Every file is written to a temporary path beside its target and then renamed, so a crash
never leaves a half-written result. results.json has the official shape
`{"zhoblimp": {"accuracy": 0.7312}, "word_fmri": {"mean": 0.12}}`.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from typing import Any, Callable, Mapping

import matplotlib.figure

from babylm_jax.core.atomic import atomic_write, atomic_write_text

Figure = matplotlib.figure.Figure | Callable[[pathlib.Path], None]  # a figure, or a writer of its PNG


@dataclasses.dataclass
class TaskResult:
    """What a task runner returns.

    values: the official number(s), in 0..1 (e.g. {"accuracy": 0.73} or {"mean": 0.12}).
    details: anything JSON-serialisable worth keeping (per-UID accuracies, counts, ...).
      Conventional keys the report shows when present: "num_items", "accuracy_strict",
      "per_phenomenon" (name -> accuracy).
    figures: name -> a matplotlib Figure, or a callable that writes a PNG to the path it is given.
    """

    values: dict[str, float]
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    figures: dict[str, Figure] = dataclasses.field(default_factory=dict)


def save_figure(path: str | pathlib.Path, figure: Figure) -> None:
    """Writes a Figure (or calls a PNG-writing callable) to `path` atomically."""
    if isinstance(figure, matplotlib.figure.Figure):
        atomic_write(path, lambda temp: figure.savefig(temp, format="png", dpi=120))
    else:
        atomic_write(path, figure)


def official_results(results: Mapping[str, TaskResult]) -> dict[str, dict[str, float]]:
    """The leaderboard shape: task -> {metric: value}, plain floats."""
    return {name: {k: float(v) for k, v in r.values.items()} for name, r in results.items()}


def format_table(results: Mapping[str, TaskResult]) -> str:
    """A Markdown table: task, metric, value, strict accuracy (ties wrong), item count and wall time."""
    lines = ["| task | metric | value | strict | items | time |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, result in results.items():
        strict = result.details.get("accuracy_strict")
        items = result.details.get("num_items")
        seconds = result.details.get("seconds")
        for metric, value in result.values.items():
            lines.append(
                f"| {name} | {metric} | {value:.4f} | "
                f"{'' if strict is None else f'{strict:.4f}'} | {'' if items is None else items} | "
                f"{'' if seconds is None else f'{seconds:.0f} s'} |"
            )
    return "\n".join(lines)


def phenomenon_figure(title: str, per_phenomenon: Mapping[str, float]) -> matplotlib.figure.Figure:
    """A horizontal bar chart of accuracy per phenomenon, with the 0.5 chance line."""
    names = sorted(per_phenomenon, key=per_phenomenon.get)
    figure = matplotlib.figure.Figure(figsize=(7, 0.3 * len(names) + 1.2))
    axes = figure.add_subplot()
    axes.barh(names, [per_phenomenon[n] for n in names], color="#4c72b0")
    axes.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    axes.set_xlim(0, 1)
    axes.set_xlabel("accuracy")
    axes.set_title(title)
    figure.tight_layout()
    return figure


def format_report(
    results: Mapping[str, TaskResult],
    metadata: Mapping[str, Any],
    skipped: Mapping[str, str],
    figure_files: Mapping[str, list[str]],
    failed: Mapping[str, str] | None = None,
) -> str:
    """report.md: run metadata, the summary table, failed and skipped tasks, per-phenomenon tables, figures."""
    parts = ["# Evaluation report", ""]
    tables = {key: value for key, value in metadata.items()
              if isinstance(value, Mapping) and value and all(isinstance(row, Mapping) for row in value.values())}
    parts += [f"- {key}: {value}" for key, value in metadata.items() if key not in tables]
    parts += ["", format_table(results), ""]
    if failed:
        parts += ["## Failed", ""] + [f"- {name}: {reason}" for name, reason in failed.items()] + [""]
    for key, rows in tables.items():  # e.g. the fine-tuning settings per task
        columns = list(dict.fromkeys(c for row in rows.values() for c in row))
        parts += [f"## {key}", "", "| | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
        parts += [f"| {name} | " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for name, row in rows.items()]
        parts.append("")
    if skipped:
        parts += ["## Skipped", ""] + [f"- {name}: {reason}" for name, reason in skipped.items()] + [""]
    for name, result in results.items():
        per_phenomenon = result.details.get("per_phenomenon")
        if not per_phenomenon and not figure_files.get(name):
            continue
        parts += [f"## {name}", ""]
        if per_phenomenon:
            parts += ["| phenomenon | accuracy |", "| --- | ---: |"]
            parts += [f"| {p} | {a:.4f} |" for p, a in sorted(per_phenomenon.items())]
            parts.append("")
        parts += [f"![{name}]({file})" for file in figure_files.get(name, [])] + [""]
    return "\n".join(parts)


def record_path(output: pathlib.Path, complete: bool) -> pathlib.Path:
    """Where an evaluation's files go: `output`, unless tasks failed and `output` holds earlier
    results, which only complete results replace: then a new folder beside it."""
    if complete or not output.exists():
        return output
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return output.parent / f"{output.stem}.incomplete-{stamp}" / output.name


def _earlier_files(directory: pathlib.Path) -> set[str]:
    """The files the last results written into `directory` consisted of (results_details.json's "files")."""
    try:
        files = json.loads((directory / "results_details.json").read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {name for name in files if isinstance(name, str) and "/" not in name and not name.startswith(".")}


def write_results(
    output: str | pathlib.Path,
    results: Mapping[str, TaskResult],
    metadata: Mapping[str, Any],
    skipped: Mapping[str, str] | None = None,
    failed: Mapping[str, str] | None = None,
) -> dict[str, pathlib.Path]:
    """Writes results.json (at `output`) and, beside it, results_details.json, report.md, PNGs.

    `skipped` and `failed` (task -> why) are recorded in the details and the report.

    Returns the paths written, by kind ("results", "details", "report", "<task>_<figure>").
    """
    output = pathlib.Path(output)
    directory = output.parent
    earlier = _earlier_files(directory)
    skipped = dict(skipped or {})
    written: dict[str, pathlib.Path] = {}
    figure_files: dict[str, list[str]] = {}
    for name, result in results.items():
        for figure_name, figure in result.figures.items():
            path = directory / f"{name}_{figure_name}.png"
            save_figure(path, figure)
            written[f"{name}_{figure_name}"] = path
            figure_files.setdefault(name, []).append(path.name)
    files = sorted({p.name for p in written.values()} | {"results_details.json", "report.md", output.name})
    details = {
        "files": files,  # what these results consist of: the next results here remove the rest
        "metadata": dict(metadata),
        "skipped": skipped,
        "failed": dict(failed or {}),
        "tasks": {name: {"values": official_results({name: r})[name], **r.details} for name, r in results.items()},
    }
    written["details"] = directory / "results_details.json"
    atomic_write_text(written["details"], json.dumps(details, indent=2, ensure_ascii=False) + "\n")
    written["report"] = directory / "report.md"
    atomic_write_text(written["report"], format_report(results, metadata, skipped, figure_files, failed))
    written["results"] = output
    atomic_write_text(output, json.dumps(official_results(results), indent=2) + "\n")
    for name in earlier - set(files):  # figures of tasks the earlier results had and these do not
        (directory / name).unlink(missing_ok=True)
    return written
