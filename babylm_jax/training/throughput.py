"""Training time measured on completed steps: tokens/s and FLOP/s that hold at any logging interval.

    timer = StepTimer()             # a window starts now (after compiling)
    timer.add(tokens, flops)        # a step dispatched in this window
    tokens, flops, seconds = timer.lap()   # once the window's last step has completed
    timer.restart()                 # after work that is not training (eval, checkpoints)

A lap must follow a block on the window's last step's outputs: dispatch returns before a step
has run, and may also wait for an earlier one, so timing dispatches gives a window either
the next window's time or none (issue 29: 9.4M tokens/s logged on a 2-core CPU). The totals
are the laps': training time without compiles, evaluation or checkpoints.
"""
from __future__ import annotations

import time
from typing import Callable


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
