"""Scores across a run's word-milestone checkpoints: the learning curve BabyLM asks them for.

    rows = [{"step": 120, "words_seen": 1.0e6, "zhoblimp": 0.58}, ...]   # one per checkpoint
    paths = write_milestone_curves(rows, output_dir)                     # JSON, Markdown, PNG

A row holds each task's official value (results.json's number) for one checkpoint; the
figure draws each task against words seen.
"""
from __future__ import annotations

import os
import pathlib
from typing import Sequence

import matplotlib.figure

from babylm_jax.core.atomic import atomic_write, atomic_write_json, atomic_write_text


def curves_table(rows: Sequence[dict], tasks: Sequence[str]) -> str:
    """The rows as a Markdown table: step, words seen, one column per task."""
    lines = ["| step | words seen | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for row in rows:
        values = " | ".join(f"{row[t]:.4f}" if t in row else "-" for t in tasks)
        lines.append(f"| {row['step']} | {row['words_seen']:,.0f} | {values} |")
    return "\n".join(lines) + "\n"


def curves_figure(rows: Sequence[dict], tasks: Sequence[str]) -> matplotlib.figure.Figure:
    figure = matplotlib.figure.Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    for task in tasks:
        points = [(r["words_seen"], r[task]) for r in rows if task in r]
        if points:
            axes.plot(*zip(*points), "o-", label=task)
    axes.set_xscale("log")
    axes.set(xlabel="jieba words seen", ylabel="score", title="scores across milestone checkpoints")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def write_milestone_curves(rows: Sequence[dict], output_dir: str | os.PathLike) -> dict[str, pathlib.Path]:
    """Writes milestone_curves.{json,md,png} into `output_dir`; returns their paths."""
    output_dir = pathlib.Path(output_dir)
    tasks = sorted({k for row in rows for k in row} - {"step", "words_seen", "tokens_seen"})
    paths = {kind: output_dir / f"milestone_curves.{kind}" for kind in ("json", "md", "png")}
    atomic_write_json(paths["json"], list(rows))
    atomic_write_text(paths["md"], curves_table(rows, tasks))
    figure = curves_figure(rows, tasks)
    atomic_write(paths["png"], lambda temp: figure.savefig(temp, format="png", dpi=100))
    return paths
