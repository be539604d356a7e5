"""What a run measures and writes as it trains: FLOPs per token, tokens/s and MFU over completed
steps, metrics.jsonl and learning_curves.png.

FLOPs (the numerator of MFU; the denominator: `peaks.py`). Convention (as MaxText): a multiply-add
is 2 FLOPs; training = 3 x forward (forward, plus backward for activations and weights). Per token,
forward =
  2 x (matmul weights: qkv, attention out, MLP)
+ 2 x (head transform + d_model x vocab, the tied output projection) at the positions that
  are predicted (all for causal models, the masked ones for the others; the embedding lookup
  is free)
+ attention: 4 x seq_len x d_model per layer (QK^T and PV), halved for causal rows
  (only the lower triangle is useful work).

Time is measured on completed steps, so tokens/s and FLOP/s hold at any logging interval:

    timer = StepTimer()             # a window starts now (after compiling)
    timer.add(tokens, flops)        # a step dispatched in this window
    tokens, flops, seconds = timer.lap()   # once the window's last step has completed
    timer.restart()                 # after work that is not training (eval, checkpoints)

A lap must follow a block on the window's last step's outputs: dispatch returns before a step
has run, and may also wait for an earlier one, so timing dispatches gives a window either
the next window's time or none (9.4M tokens/s were once logged on a 2-core CPU). The totals
are the laps': training time without compiles, evaluation or checkpoints. The step logger
fetches train-step metrics one step late, and refuses NaN losses:

    logger = StepLogger(MetricsWriter(workdir), model_config, run, log_every, last_step)
    entry = logger.step_done(step, metrics_on_device, words_seen)   # an entry at logging steps, else None
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable

import jax

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import AUX_HEADS, AuxHeadsSettings
from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write, atomic_write_text
from babylm_jax.core.families import family_spec
from babylm_jax.corpus import hanzi_labels
from babylm_jax.training.peaks import device_peak_flops
from babylm_jax.training.step import mask_rate_at, seq_len_at


def matmul_params(c: ModelConfig) -> int:
    """Weights that take part in matmuls, per token, excluding the output projection."""
    mlp = (3 if c.mlp == "swiglu" else 2) * c.d_model * c.d_ff
    per_layer = 4 * c.d_model * c.d_model + mlp
    head = c.d_model * c.d_model if c.has_head_transform else 0
    return c.num_layers * per_layer + head


def causal_share(config: RunConfig) -> float:
    """The share of rows that attend causally: 1 (causal), 0 (mlm), train.hybrid_causal_share (hybrid)."""
    return family_spec(config.model.family).causal_share(config.train.hybrid_causal_share)


def predicted_share(config: RunConfig, mask_rate: float) -> float:
    """The share of positions a step projects to the vocabulary: every one (causal), the masked
    ones (mlm: `mask_rate`), or the causal rows' and the masked ones (hybrid)."""
    share = causal_share(config)
    return share + (1.0 - share) * mask_rate


def forward_flops_per_token(c: ModelConfig, seq_len: int, causal_share: float, predicted_share: float = 1.0) -> float:
    """Forward FLOPs per token; `causal_share` is the fraction of rows attending causally,
    `predicted_share` the fraction of positions projected to the vocabulary (with the head
    transform, for mlm and hybrid models)."""
    attention = 4 * seq_len * c.d_model * c.num_layers * (1.0 - 0.5 * causal_share)
    head = c.d_model * c.d_model if c.has_head_transform else 0
    body = matmul_params(c) - head
    return 2 * body + 2 * predicted_share * (head + c.d_model * c.vocab_size) + attention


def train_flops_per_token(c: ModelConfig, seq_len: int, causal_share: float, predicted_share: float = 1.0) -> float:
    return 3 * forward_flops_per_token(c, seq_len, causal_share, predicted_share)


def aux_heads_flops_per_token(d_model: int, aux_heads: AuxHeadsSettings) -> float:
    """The auxiliary heads' training FLOPs a token, outside the model FLOPs MFU counts: a matmul of d_model into
    each weighted head's classes at every position, forward and backward."""
    sizes = hanzi_labels.head_sizes()
    return 6 * d_model * sum(sizes[head] for head in AUX_HEADS if getattr(aux_heads, head) > 0)


class StepTimer:
    """Windows of completed steps and the run's totals over them."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.total_tokens = self.total_flops = self.total_seconds = 0.0
        self.restart()

    def restart(self) -> None:
        """Starts an empty window now (the steps added since the last lap are not timed)."""
        self.start, self.tokens, self.flops = self.clock(), 0.0, 0.0

    def add(self, tokens: float, flops: float) -> None:
        self.tokens, self.flops = self.tokens + tokens, self.flops + flops

    def lap(self) -> tuple[float, float, float]:
        """(tokens, FLOPs, seconds) of the window, added to the totals; the next window starts now."""
        seconds = self.clock() - self.start
        window = (self.tokens, self.flops, seconds)
        self.total_tokens += self.tokens
        self.total_flops += self.flops
        self.total_seconds += seconds
        self.restart()
        return window

    def tokens_per_s(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else 0.0

    def flops_per_s(self) -> float:
        return self.total_flops / self.total_seconds if self.total_seconds > 0 else 0.0


class MetricsWriter:
    """Appends one JSON object per line to `<workdir>/metrics.jsonl` (process 0 only)."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.path = os.path.join(workdir, rundir.METRICS)
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def trim_metrics(workdir: str, last_step: int, name: str = rundir.METRICS) -> None:
    """Makes `<workdir>/<name>` (metrics.jsonl, samples.jsonl) fit a run resumed at `last_step`.

    Drops a partial last line (a run killed mid-write) and the records of steps after
    `last_step` (they will be trained and logged again), so each step is logged once.
    """
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    kept = []
    for line in text.split("\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the partial line a killed run left (or the empty string after the last newline)
        if isinstance(record, dict) and record.get("step", 0) <= last_step:
            kept.append(line)
    trimmed = "".join(line + "\n" for line in kept)
    if trimmed != text:
        atomic_write_text(path, trimmed)


class LossNotFinite(FloatingPointError, ValueError):
    """A NaN or infinite training loss: a user error (learning rate, data), reported in one line."""


class StepLogger:
    """Train-step metrics, fetched one step late so the host never stalls the device, except at
    logging steps: those block on their step's outputs, so that tokens/s and MFU time completed
    steps (`StepTimer`) at any logging interval.

    Owns the timer, the history of logged steps and the writer; a non-finite loss raises
    LossNotFinite (a FloatingPointError) naming the step.
    """

    def __init__(self, writer: MetricsWriter, model: ModelConfig, config: RunConfig, log_every: int, last_step: int,
                 clock: Callable[[], float] = time.perf_counter):
        self.writer, self.model, self.config = writer, model, config
        self.log_every, self.last_step = log_every, last_step
        self.tokens_per_step = config.train.batch_size * config.train.seq_len
        self.causal_share = causal_share(config)
        self.peak_flops, self.peak_source = device_peak_flops()
        self.history: list[dict] = []
        self.pending: tuple[int, dict, float] | None = None  # (step, metrics on device, words seen)
        self.timer = StepTimer(clock)  # after the peak's probe: windows time steps only

    def restart_window(self) -> None:
        """After work that is not training (eval, checkpoints): the next window starts now."""
        self.timer.restart()

    def step_flops(self, step: int) -> float:
        """Training FLOPs of `step` (1-based): its row length and mask rate."""
        seq_len = seq_len_at(self.config.train, step - 1)
        predicted = predicted_share(self.config, float(mask_rate_at(self.config.train, step - 1)))
        return self.tokens_per_step * train_flops_per_token(self.model, seq_len, self.causal_share, predicted)

    def is_log_step(self, step: int) -> bool:
        return step % self.log_every == 0 or step == self.last_step

    def step_done(self, step: int, metrics_on_device: dict, words_seen: float) -> dict | None:
        """Checks the previous step (its metrics are ready by now) and keeps this one pending; at a
        logging step, blocks on this step and returns its entry."""
        self.timer.add(self.tokens_per_step, self.step_flops(step))
        self.flush(fetch=False)
        self.pending = (step, metrics_on_device, words_seen)
        return self.flush() if self.is_log_step(step) else None

    def flush(self, fetch: bool = True) -> dict | None:
        """Checks the pending step; with `fetch`, blocks on it (the last step dispatched) and closes
        the timing window there. Returns its entry when it is a logging step."""
        if self.pending is None:
            return None
        step, on_device, words = self.pending
        self.pending = None
        fetched = jax.device_get(on_device) if fetch else on_device
        loss = float(fetched["loss"])
        if not math.isfinite(loss):
            raise LossNotFinite(f"loss is {loss} at step {step}; lower train.learning_rate or check the data")
        if not fetch:
            return None
        tokens, flops, seconds = self.timer.lap()
        return self._record(step, fetched, words, tokens, flops, seconds) if self.is_log_step(step) else None

    def _record(self, step: int, fetched: dict, words: float, tokens: float, flops: float, seconds: float) -> dict:
        entry = {
            "step": step, "loss": float(fetched["loss"]), "grad_norm": float(fetched["grad_norm"]),
            "learning_rate": float(fetched["learning_rate"]),
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "mfu": flops / seconds / self.peak_flops if seconds > 0 else 0.0,
            "tokens_seen": step * self.tokens_per_step, "words_seen": words,
            **{k: float(v) for k, v in fetched.items() if k.startswith("aux_")},  # auxiliary heads' loss, acc
        }
        self.history.append(entry)
        self.writer.write(entry)
        return entry

    def mean_mfu(self) -> float:
        """The run's FLOPs over its training time (completed steps, no compiles or evaluations), over the peak."""
        return self.timer.flops_per_s() / self.peak_flops


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
