"""The step logger: train-step metrics fetched one step late, tokens/s and MFU, NaN losses refused.

    logger = StepLogger(MetricsWriter(workdir), model_config, run, log_every, last_step)
    entry = logger.step_done(step, metrics_on_device, words_seen)   # an entry at logging steps, else None
"""
from __future__ import annotations

import math
import time
from typing import Callable

import jax

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.training.flops import causal_share, predicted_share, train_flops_per_token
from babylm_jax.training.metrics_file import MetricsWriter
from babylm_jax.training.peaks import device_peak_flops
from babylm_jax.training.throughput import StepTimer
from babylm_jax.training import curricula


class LossNotFinite(FloatingPointError, ValueError):
    """A NaN or infinite training loss: a user error (learning rate, data), reported in one line."""


class StepLogger:
    """Train-step metrics, fetched one step late so the host never stalls the device, except at
    logging steps: those block on their step's outputs, so that tokens/s and MFU time completed
    steps (`throughput.StepTimer`) at any logging interval.

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
        seq_len = curricula.seq_len_at(self.config.train, step - 1)
        predicted = predicted_share(self.config, float(curricula.mask_rate_at(self.config.train, step - 1)))
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
