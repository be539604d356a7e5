"""Progress for long steps that report nothing themselves (a C++ trainer, one big jitted call).

    with elapsed("SentencePiece: training bpe, vocab 32,768"):
        spm.SentencePieceTrainer.train(...)

shows a line with the seconds elapsed, refreshed every second, and the total at the end.
"""
from __future__ import annotations

import contextlib
import threading
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
