"""Evaluations during training: the eval loss on the held-out batches and, when asked, task scores.

    evaluator = RunEvaluator(run, writer, programs)
    line = evaluator.evaluate(step, "eval")   # writes one metrics record; returns the progress line
"""
from __future__ import annotations

import math
import time
from typing import Any

from babylm_jax.core import writers
from babylm_jax.training.compiled import StepPrograms, device_arrays
from babylm_jax.training.run import Run
from babylm_jax.training.task_curves import TaskCurves
from babylm_jax.training import sharding
from babylm_jax.training.state import TrainState


def evaluate_loss(eval_step, params, eval_batches: list[dict], mesh) -> float:
    """Token-weighted mean loss over the fixed held-out batches."""
    total, count = 0.0, 0.0
    for batch in eval_batches:
        batch = sharding.global_batch(device_arrays(batch), mesh)
        loss_sum, n = eval_step(params, batch)
        total, count = total + float(loss_sum), count + float(n)
    return total / max(count, 1.0)


def eval_params(state: TrainState) -> Any:
    """The parameters evaluation uses: EMA ones when the run keeps them."""
    return state.ema_params if state.ema_params is not None else state.params



class RunEvaluator:
    """Eval loss on the held-out batches and, when `train.eval_tasks` asks, task scores."""

    def __init__(self, run: Run, writer: writers.RunWriters, programs: StepPrograms):
        self.run, self.writer = run, writer
        self.eval_step = lambda params, batch: programs.eval(batch)(params, batch)
        self.batches = run.data.eval_batches[: run.config.train.eval_batches]
        self.curves = TaskCurves.from_config(run.config.train, run.data.tokenizer, run.model, eval_params(run.state))
        self.last_loss, self.last_scores, self.task_seconds = math.nan, {}, 0.0

    def evaluate(self, step: int, at: str, with_loss: bool = True) -> str:
        """Evaluates the current state, writes one metrics record, returns a progress line."""
        params, record = eval_params(self.run.state), {"step": step, "words_seen": self.run.words_seen}
        if with_loss:
            self.last_loss = record["eval_loss"] = evaluate_loss(self.eval_step, params, self.batches, self.run.mesh)
        if self.curves is not None:
            start = time.perf_counter()
            self.last_scores = self.curves.score(params)
            seconds = time.perf_counter() - start
            self.task_seconds += seconds
            record.update({f"task/{name}": acc for name, acc in self.last_scores.items()},
                          task_seconds=seconds, task_at=at)
        self.writer.write(record)
        shown = [f"eval_loss {self.last_loss:.4f}"] if with_loss else []
        shown += [f"{name} {acc:.4f}" for name, acc in self.last_scores.items()]
        return f"step {step}: " + ", ".join(shown)

