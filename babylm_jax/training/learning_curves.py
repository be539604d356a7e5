"""learning_curves.png: train and eval loss against steps and task scores against words seen, from metrics.jsonl."""
from __future__ import annotations

import json
import os

from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write


def plot_learning_curves(workdir: str) -> str:
    """Writes `<workdir>/learning_curves.png` from metrics.jsonl: train and eval loss against
    step and, when the run scored tasks, each task's accuracy against words seen."""
    import matplotlib.figure

    train, evals, tasks = {}, {}, {}
    with open(os.path.join(workdir, rundir.METRICS), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "eval_loss" in record:
                evals[record["step"]] = record["eval_loss"]
            elif "loss" in record:
                train[record["step"]] = record["loss"]
            for key, value in record.items():
                if key.startswith("task/"):
                    tasks.setdefault(key[len("task/"):], {})[record["words_seen"]] = value
    figure = matplotlib.figure.Figure(figsize=(11 if tasks else 6, 4))
    loss_axes = figure.add_subplot(1, 2 if tasks else 1, 1)
    for points, label, style in ((train, "train loss", "-"), (evals, "eval loss", "o-")):
        if points:
            loss_axes.plot(*zip(*sorted(points.items())), style, label=label)
    loss_axes.set(xlabel="step", ylabel="loss (nats/token)")
    loss_axes.legend()
    loss_axes.grid(alpha=0.3)
    if tasks:
        task_axes = figure.add_subplot(1, 2, 2)
        for name, points in sorted(tasks.items()):
            task_axes.plot(*zip(*sorted(points.items())), "o-", label=name)
        task_axes.axhline(0.5, color="grey", linestyle=":", linewidth=1)
        task_axes.set(xlabel="jieba words seen", ylabel="accuracy (sample, macro over UIDs)")
        task_axes.legend()
        task_axes.grid(alpha=0.3)
    figure.tight_layout()
    path = os.path.join(workdir, rundir.LEARNING_CURVES)
    atomic_write(path, lambda temp: figure.savefig(temp, format="png", dpi=100))
    return path

