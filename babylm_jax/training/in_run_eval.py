"""Evaluations during training: the eval loss on the held-out batches and, when asked, task scores on a
fixed, paradigm-balanced sample of each minimal-pair task.

    evaluator = RunEvaluator(run, writer, programs)
    line = evaluator.evaluate(step, "eval")   # writes one metrics record; returns the progress line

    curves = TaskCurves.from_config(config.train, tokenizer, model, params)   # None when off or no data
    scores = curves.score(params)                               # {"zhoblimp": 0.61, ...}

`train.eval_tasks` names the tasks (comma-separated minimal-pair tasks; "" = off),
`train.eval_task_items` the sample size per task: the same number of items from every UID
(evenly spaced inside each), so 1,180 items of ZhoBLiMP cover its 118 paradigms ten times
each (the first N items would be one phenomenon). Data come from `train.eval_data_dir`,
else from `$BABYLM_DATA_DIR`; without either, curves are off with one notice. The sentence
scorer compiles once and is reused with each new set of parameters.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import time
from typing import Any, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from babylm_jax.config.training import TrainConfig
from babylm_jax.core import writers
from babylm_jax.core.families import family_spec
from babylm_jax.eval.zero_shot import minimal_pairs, scoring
from babylm_jax.model.transformer import Transformer
from babylm_jax.tasks import registry as tasks
from babylm_jax.training import sharding
from babylm_jax.training.compiled import StepPrograms, device_arrays
from babylm_jax.training.run import Run
from babylm_jax.training.samples import RunSamples
from babylm_jax.training.state import TrainState


def sample_by_uid(pairs: Sequence[minimal_pairs.Pair], items: int) -> list[minimal_pairs.Pair]:
    """About `items` pairs: the same number from every UID, evenly spaced within it, in file order."""
    by_uid: dict[str, list[int]] = collections.defaultdict(list)
    for i, pair in enumerate(pairs):
        by_uid[pair.uid].append(i)
    per_uid = max(1, items // max(len(by_uid), 1))
    chosen = []
    for members in by_uid.values():
        picks = np.unique(np.linspace(0, len(members) - 1, min(per_uid, len(members))).round().astype(int))
        chosen += [members[p] for p in picks]
    return [pairs[i] for i in sorted(chosen)]


@dataclasses.dataclass
class TaskSample:
    pairs: list[minimal_pairs.Pair]
    unk_is_wrong: bool


def _fitting(pairs: list[minimal_pairs.Pair], tokenizer: Any, model: Transformer, task: str) -> list[minimal_pairs.Pair]:
    """The pairs whose framed sentences fit the model's max_len (a notice says how many did not)."""
    room = model.config.max_len - 2  # opener and closer
    kept = [p for p in pairs if max(len(tokenizer.encode(p.good)), len(tokenizer.encode(p.bad))) <= room]
    if len(kept) < len(pairs):
        print(f"[train] task curves: {len(pairs) - len(kept)} of {len(pairs)} sampled {task} pairs are longer than "
              f"model.max_len={model.config.max_len} tokens and are left out of the curve")
    return kept


def _task_names(train: TrainConfig) -> list[str]:
    names = [n.strip() for n in train.eval_tasks.split(",") if n.strip()]
    for name in names:
        spec = tasks.TASKS.get(name)
        if spec is None or spec.track != "zero_shot":
            zero_shot = [n for n, s in tasks.TASKS.items() if s.track == "zero_shot"]
            raise ValueError(f"config key train.eval_tasks: {name!r} is not a minimal-pair task; use some of {zero_shot}")
    return names


def _data_dir(train: TrainConfig) -> str | None:
    return train.eval_data_dir or os.environ.get("BABYLM_DATA_DIR") or None


def task_files(train: TrainConfig) -> dict[str, list] | None:
    """Each task's files for the curves `train.eval_tasks` asks for (None when off or no data directory);
    a missing one names where the data directory came from and a way on, so `loop` checks it before any work."""
    names, data_dir = _task_names(train), _data_dir(train)
    if not names or data_dir is None:
        return None
    source = "config key train.eval_data_dir" if train.eval_data_dir else "environment variable BABYLM_DATA_DIR"
    try:
        return {name: tasks.get_task(name).find_files(data_dir) for name in names}
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error} ({source}={data_dir!r}); point it at the task data, or train without "
                                "task curves: --config.train.eval_tasks=''") from None


class TaskCurves:
    """Scores a fixed sample of each task with one compiled scorer."""

    def __init__(self, samples: dict[str, TaskSample], tokenizer: Any, model: Transformer, params: Any):
        self.samples, self.tokenizer = samples, tokenizer
        variant = family_spec(model.config.family).scoring
        self.scorer = scoring.SentenceScorer(model, self._local(params), variant, tokenizer.mask_id)

    @classmethod
    def from_config(
        cls, train: TrainConfig, tokenizer: Any, model: Transformer, params: Any
    ) -> "TaskCurves | None":
        """The curves `train.eval_tasks` asks for; None when off (or no data directory, with a notice)."""
        names = _task_names(train)
        if not names:
            return None
        data_dir = _data_dir(train)
        if data_dir is None:
            print("[train] task curves off: train.eval_tasks needs train.eval_data_dir or $BABYLM_DATA_DIR")
            return None
        samples = {}
        for name, files in (task_files(train) or {}).items():  # FileNotFoundError names the task and the folder
            spec = tasks.get_task(name)
            pairs = minimal_pairs.read_pairs(files, spec.pair_format)
            sample = _fitting(sample_by_uid(pairs, train.eval_task_items), tokenizer, model, name)
            samples[name] = TaskSample(sample, spec.unk_is_wrong)
        return cls(samples, tokenizer, model, params)

    @staticmethod
    def _local(params: Any) -> Any:
        """The parameters as host arrays of this process (gathered from every host when sharded)."""
        if jax.process_count() > 1:
            return multihost_utils.process_allgather(params, tiled=True)
        return params

    def score(self, params: Any) -> dict[str, float]:
        """Macro-averaged accuracy of each task's sample under `params`."""
        self.scorer.set_params(self._local(params))
        return {
            name: minimal_pairs.evaluate_pairs(self.scorer, self.tokenizer, sample.pairs, sample.unk_is_wrong)["accuracy"]
            for name, sample in self.samples.items()
        }


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
    """Eval loss on the held-out batches, task scores when `train.eval_tasks` asks, text samples when
    `train.sample_prompts` does (their decode program compiled here, before step 1)."""

    def __init__(self, run: Run, writer: writers.RunWriters, programs: StepPrograms):
        self.run, self.writer = run, writer
        self.eval_step = lambda params, batch: programs.eval(batch)(params, batch)
        self.batches = run.data.eval_batches[: run.config.train.eval_batches]
        self.curves = TaskCurves.from_config(run.config.train, run.data.tokenizer, run.model, eval_params(run.state))
        self.samples = RunSamples.for_run(run, eval_params(run.state))
        self.last_scores, self.task_seconds = {}, 0.0
        self.last_loss: float | None = None  # none without held-out text (`run.no_held_out_line`), never 0

    def evaluate(self, step: int, at: str, with_loss: bool = True) -> str:
        """Evaluates the current state, writes one metrics record, returns a progress line."""
        params, record = eval_params(self.run.state), {"step": step, "words_seen": self.run.words_seen}
        with_loss = with_loss and bool(self.batches)
        if with_loss:
            self.last_loss = record["eval_loss"] = evaluate_loss(self.eval_step, params, self.batches, self.run.mesh)
        if self.curves is not None:
            start = time.perf_counter()
            self.last_scores = self.curves.score(params)
            seconds = time.perf_counter() - start
            self.task_seconds += seconds
            record.update({f"task/{name}": acc for name, acc in self.last_scores.items()},
                          task_seconds=seconds, task_at=at)
        rows = []
        if self.samples is not None and at == "eval":
            start = time.perf_counter()
            rows = self.samples.sample(step, params)
            record["sample_seconds"] = time.perf_counter() - start
        self.writer.write(record)
        if rows:
            self.writer.samples(step, rows)
        shown = [f"eval_loss {self.last_loss:.4f}"] if with_loss else []
        shown += [f"{name} {acc:.4f}" for name, acc in self.last_scores.items()]
        shown += [f"{rows[0]['prompt']} → {rows[0]['text']}"] if rows else []
        return f"step {step}: " + (", ".join(shown) or "no held-out text, no eval loss")

    @property
    def sample_seconds(self) -> float:
        return 0.0 if self.samples is None else self.samples.seconds
