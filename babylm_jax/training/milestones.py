"""Word milestones: BabyLM asks for checkpoints at 1M, 2M, ..., 10M, 20M, ..., 100M words seen."""
from __future__ import annotations

import math
from typing import Iterator


def word_milestones(unit: float) -> Iterator[float]:
    """1, 2, ..., 10, 20, ..., 100, then every 100 units (BabyLM learning-dynamics checkpoints)."""
    yield from (unit * k for k in range(1, 10))
    yield from (unit * 10 * k for k in range(1, 10))
    k = 1
    while True:
        yield unit * 100 * k
        k += 1


class WordMilestones:
    """The next milestone after the words already seen (none when `enabled` is off)."""

    def __init__(self, unit: float, words_seen: float, enabled: bool):
        self._upcoming = (m for m in word_milestones(unit) if m > words_seen)
        self.next = next(self._upcoming) if enabled else math.inf

    def passed(self, words_seen: float) -> float | None:
        """The milestone `words_seen` has just reached (advancing past all reached), else None."""
        if words_seen < self.next:
            return None
        reached = self.next
        while self.next <= words_seen:
            self.next = next(self._upcoming)
        return reached
