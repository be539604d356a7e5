"""The conditions a benchmark ran under: matmul peak of this run against the best known idle
peak of this machine kind, and the load average before and after.

    conditions = Conditions.start()         # load average now
    conditions.probe()                      # a 2048^2 float32 matmul; call between timed repeats
    ...
    conditions.report()                     # prints the peak, the load and, if far off, a WARNING

On a shared machine the achieved FLOP/s of a small model and of a large matmul fall by
different amounts (a large multithreaded matmul suffers most from a stolen core), so an
efficiency measured against this run's peak can overstate the idle one about twofold.
Ratios of two things timed interleaved in one process hold up better; absolute figures are
reported against `best_peak` too, the best matmul FLOP/s ever measured for this CPU model,
core count and probe size, kept in ~/.cache/babylm_jax/peak.json (or $BABYLM_PEAK_CACHE)
and raised whenever a run measures more.
"""
from __future__ import annotations

import os
import pathlib
import sys
from typing import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from babylm_jax.core.atomic import atomic_write_json  # noqa: E402
from babylm_jax.training.peaks import (  # noqa: E402,F401  (KNOWN_IDLE_PEAKS, cpu_name: tests read them here)
    KNOWN_IDLE_PEAKS, cache_path, cpu_name, machine_kind, measure_matmul_peak)
from babylm_jax.training.peaks import read_cache as _read_cache  # noqa: E402

FAR_BELOW = 0.7  # warn when this run's peak is under this share of the best known


class Conditions:
    """Matmul peaks measured in this run, the best known idle peak, and the load average."""

    def __init__(self, n: int = 2048):
        self.n = n
        self.kind = machine_kind(n)
        self.load_before = os.getloadavg()
        self.peaks: list[float] = []
        cached = _read_cache().get(self.kind, 0.0)
        self.known_peak = max(cached, KNOWN_IDLE_PEAKS.get(self.kind, 0.0))

    @classmethod
    def start(cls, n: int = 2048) -> "Conditions":
        return cls(n)

    def probe(self, repeats: int = 3) -> float:
        """Measures the matmul peak once more (best of `repeats` calls); returns it."""
        self.peaks.append(measure_matmul_peak(n=self.n, repeats=repeats))
        return self.peaks[-1]

    @property
    def run_peak(self) -> float:
        """The best peak of this run (probes it once if none was taken)."""
        if not self.peaks:
            self.probe()
        return max(self.peaks)

    @property
    def best_peak(self) -> float:
        """The best peak known for this machine kind: cached, known, or this run's."""
        return max(self.known_peak, self.run_peak)

    @property
    def run_share(self) -> float:
        return self.run_peak / self.best_peak

    def report(self, emit: Callable[[str], None] = print) -> None:
        """Prints the conditions (and a WARNING line if the run's peak is far below the best
        known), then raises the cached best if this run measured more."""
        load_after = os.getloadavg()
        emit(f"matmul peak, this run: {self.run_peak / 1e9:,.1f} GFLOP/s (best of {len(self.peaks)} probes: "
             f"{', '.join(f'{p / 1e9:,.0f}' for p in self.peaks)}; {self.kind})")
        emit(f"matmul peak, best known idle: {self.best_peak / 1e9:,.1f} GFLOP/s ({cache_path()})")
        emit(f"load average (1, 5, 15 min): before {', '.join(f'{x:.2f}' for x in self.load_before)}; "
             f"after {', '.join(f'{x:.2f}' for x in load_after)}; cores {os.cpu_count()}")
        if self.run_share < FAR_BELOW:
            emit(f"WARNING: this run's matmul peak is {self.run_share:.2f} of the best known: the machine is busy; "
                 "absolute figures and shares of peak are not what an idle machine gives (ratios measured "
                 "side by side hold up better)")
        emit(f"peak_share_of_best_known: {self.run_share:.2f}")
        if self.run_peak > _read_cache().get(self.kind, 0.0):
            cache = _read_cache()
            cache[self.kind] = self.run_peak
            atomic_write_json(cache_path(), cache)
