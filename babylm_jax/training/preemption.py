"""The stop signals (SIGTERM, SIGINT, SIGHUP) during training: stop cleanly at a step boundary, never mid-write.

    with StopSignals() as stop:
        setup()                      # a signal here raises Stopped at once (nothing to save)
        stop.defer()                 # from now on a signal only sets a flag ...
        for step in ...:
            train_step()
            if stop.should_stop(step):   # ... the loop reads after each step, then it
                save(step); raise stop.stopped("... where to resume")   # checkpoints and reports

TPU pods and cluster schedulers preempt jobs with SIGTERM; Ctrl-C sends SIGINT; a closed terminal or a
dropped ssh session SIGHUP. A second signal while the last checkpoint is being written waits for it (a
third one is the default: it kills). Exit status: 128 + the signal's number, 143 after SIGTERM and 130 after
SIGINT, 129 after SIGHUP, as shells report a command a signal ended (`core.stops.stop_exit_status`).
"""
from __future__ import annotations

import signal
import threading
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from babylm_jax.core.stops import STOP_SIGNALS as SIGNALS, Stopped, stop_when_safe

AGREE_EVERY_STEPS = 10  # multi-process runs: how often the processes agree on a stop (a host sync)


class StopSignals:
    """Handlers for the stop signals while training (main thread only; elsewhere a no-op)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._deferred = False
        self._count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def defer(self) -> None:
        """From now on a signal is only recorded; the training loop stops at the end of its step."""
        self._deferred = True

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def should_stop(self, step: int) -> bool:
        """Whether the loop stops after `step`: at once in a one-process run; the processes of a
        multi-process run (each may get its signal at another step) agree every AGREE_EVERY_STEPS."""
        if jax.process_count() == 1:
            return self.requested
        if step % AGREE_EVERY_STEPS:
            return False
        signals = multihost_utils.process_allgather(np.asarray(self.signum or 0, np.int32))
        if self.signum is None and np.any(signals):
            self.signum = int(np.max(signals))
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def stopped(self, message: str) -> Stopped:
        """The exception the trainer raises once it has saved and reported."""
        assert self.signum is not None
        return Stopped(self.signum, message)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if not self._deferred:  # raised at once, or once the setup's XLA compile or import under way has ended
            stop_when_safe(signum, frame, f"stopped by {signal.Signals(signum).name} before the first "
                                   "training step; nothing needed saving (run the same command to start again)")
            return
        self._count += 1
        if self._count >= 3:  # the user insists: back to the default, which ends the process
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
