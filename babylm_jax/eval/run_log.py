"""`evaluate --config.log_to_run=True`: results into the training run's TensorBoard folder and W&B run.

Per checkpoint: `eval/<task>` against `eval/checkpoint_step` (and the words seen), each
fine-tuning task's dev accuracy and train loss per epoch (`finetune/<task>/step_<N>/...`
against the epoch), and the per-UID accuracies of minimal-pair tasks as a summary. With
`--milestones`: `milestone/<task>` against `milestone/words_seen`.
"""
from __future__ import annotations

import pathlib
from typing import Mapping, Sequence

from babylm_jax.config.training import TrainConfig
from babylm_jax.eval.results import TaskResult
from babylm_jax.core import writers


def check_run(workdir: pathlib.Path, train: TrainConfig) -> None:
    """Refuses `log_to_run` for a run that keeps no TensorBoard folder or W&B run."""
    if writers.chosen_writers(train.writers) == ("jsonl",):
        raise ValueError(
            f"--config.log_to_run=True: the run in {workdir} was trained with train.writers="
            f"{train.writers}, so there is no TensorBoard folder or W&B run "
            "to log to; train with --config.train.writers='(\"jsonl\", \"tensorboard\")' (or \"wandb\")")


class RunLog:
    """The run's writers, open for the whole evaluation."""

    def __init__(self, workdir: pathlib.Path, train: TrainConfig):
        """`train`: the run's `train.*` settings (its saved config's)."""
        check_run(workdir, train)
        writers.check_wandb_ready(train.writers, train.wandb.mode)
        self.writers = writers.reopen_writers(str(workdir), train)

    def checkpoint(self, step: int, words_seen: float, results: Mapping[str, TaskResult],
                   metrics: Mapping[str, str]) -> None:
        """One checkpoint's results; `metrics`: task -> its official metric."""
        point = {"checkpoint_step": step, "words_seen": words_seen,
                 **{name: r.values[metrics[name]] for name, r in results.items()}}
        per_uid = {f"eval/{name}/per_uid": r.details["per_uid"] for name, r in results.items()
                   if "per_uid" in r.details}
        for writer in self.writers:
            writer.curve("eval", "checkpoint_step", [point])
            for name, result in results.items():
                epochs = result.details.get("dev_accuracy_per_epoch")
                if epochs:
                    losses = result.details.get("train_loss_per_epoch") or [None] * len(epochs)
                    writer.curve(f"finetune/{name}/step_{step}", "epoch", [
                        {"epoch": e, "dev_accuracy": a, **({} if l is None else {"train_loss": l})}
                        for e, (a, l) in enumerate(zip(epochs, losses), start=1)])
            if per_uid:
                writer.summary(per_uid, step)

    def milestones(self, rows: Sequence[Mapping[str, float]]) -> None:
        """The milestone table (step, words_seen, task scores) as curves against words seen."""
        points = [{k: v for k, v in row.items() if k != "step"} for row in rows]
        for writer in self.writers:
            writer.curve("milestone", "words_seen", points)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
