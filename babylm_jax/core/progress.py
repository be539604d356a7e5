"""Progress for long steps that report nothing themselves (a C++ trainer, one big jitted call).

    with elapsed("SentencePiece: training bpe, vocab 32,768"):
        spm.SentencePieceTrainer.train(...)

shows a line with the seconds elapsed, refreshed every second, and the total at the end.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from tqdm import tqdm


@contextlib.contextmanager
def elapsed(desc: str, refresh_s: float = 1.0) -> Iterator[None]:
    """A ticking "desc: M:SS" line while the block runs (tqdm, so it goes where other bars go)."""
    bar = tqdm(desc=desc, bar_format="{desc}: {elapsed}", leave=True)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(refresh_s):
            bar.refresh()

    thread = threading.Thread(target=tick, name=f"elapsed: {desc}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()


class StageTimes:
    """Wall seconds of a job's named stages, in the order they first ran; `summary` says where the time went."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def summary(self, job: str) -> str:
        """e.g. "prepare took 212.4 s: count words 80.1 s (38%), tokenise 40.0 s (19%), ..."."""
        total = sum(self.seconds.values())
        parts = [f"{name} {s:.1f} s ({s / total:.0%})" for name, s in self.seconds.items()] if total else []
        return f"{job} took {total:.1f} s" + (": " + ", ".join(parts) if parts else "")
