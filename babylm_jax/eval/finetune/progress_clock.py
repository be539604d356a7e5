"""What a fine-tuning task prints about its time: the plan up front, the compile, and estimates of what is left.

    clock = ProgressClock("tnews", num_steps, progress=True)
    clock.plan(options, num_train, num_dev)     # examples x epochs = steps, before compiling
    clock.after_step(step, loss)                # after every step: times the first ones, prints an estimate once
    clock.evaluated(seconds, epochs)            # after the first dev evaluation: the evaluations left

Each line is "[finetune] <task>: ..."; nothing is printed without `progress`.
"""
from __future__ import annotations

import dataclasses
import time

import jax

from babylm_jax.config.evaluation import FinetuneOptions

TIMED_STEPS = 10  # steps timed (after the first) for the estimate printed before the rest


@dataclasses.dataclass
class ProgressClock:
    """The up-front plan of one task and the estimate from its first timed steps, printed once each."""

    task: str
    num_steps: int
    progress: bool
    started: float = 0.0
    printed: bool = False

    def plan(self, options: FinetuneOptions, num_train: int, num_dev: int) -> None:
        self.say(f"{num_train:,} examples x {options.epochs} epochs = {self.num_steps:,} steps of "
                 f"{options.batch_size}; {num_dev:,} dev examples evaluated after each epoch")

    def compiled(self, rows: list[int], seconds: float) -> None:
        self.say(f"compiled the train step for {len(rows)} row count(s) {rows} and the dev step in {seconds:.1f} s")

    def after_step(self, step: int, loss: jax.Array) -> None:
        """Times steps 1..1+TIMED_STEPS (one device sync at each end) and prints the estimate."""
        if self.printed or step not in (1, 1 + TIMED_STEPS) or self.num_steps < 1 + TIMED_STEPS:
            return
        loss.block_until_ready()
        if step == 1:
            self.started = time.perf_counter()
            return
        per_step = (time.perf_counter() - self.started) / TIMED_STEPS
        self.printed = True
        self.say(f"{1 / per_step:.2f} steps/s over steps 2-{step}: training about "
                 f"{_duration(per_step * (self.num_steps - step))} more (dev evaluations not included)")

    def evaluated(self, seconds: float, epochs: int) -> None:
        if epochs > 1:
            self.say(f"dev evaluation {seconds:.1f} s: about {_duration(seconds * (epochs - 1))} more over the "
                     f"{epochs - 1} epochs left")

    def say(self, text: str) -> None:
        if self.progress:
            print(f"[finetune] {self.task}: {text}", flush=True)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"
