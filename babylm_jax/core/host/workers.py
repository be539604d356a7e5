"""Work for the prepare steps: cut into chunks of about N characters, run in a pool of processes.

Workers exit on their own when their parent dies (killed, or stopped by a signal), instead
of living on as orphans waiting for tasks.
"""
from __future__ import annotations

import collections
import multiprocessing
import os
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

import tqdm

T = TypeVar("T")


def chunks_by_chars(items: Iterable[T], chars: Callable[[T], int], limit: int) -> Iterator[list[T]]:
    """`items` in order, in lists of at least `limit` characters each (the last may hold fewer)."""
    chunk, total = [], 0
    for item in items:
        chunk.append(item)
        total += chars(item)
        if total >= limit:
            yield chunk
            chunk, total = [], 0
    if chunk:
        yield chunk


def num_workers(configured: int) -> int:
    """`data.num_workers`, where 0 means every core."""
    return configured if configured > 0 else (os.cpu_count() or 1)


def exit_with_parent(parent_pid: int, initializer: Callable[[], None] | None = None, poll_s: float = 0.5) -> None:
    """Pool initializer: a daemon thread ends this worker once `parent_pid` is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    if initializer is not None:
        initializer()


def run_tasks(
    fn: Callable, tasks: Iterable[tuple], workers: int, total: int | None, desc: str,
    initializer: Callable[[], None] | None = None,
) -> None:
    """Runs `fn(*task)` for every task with at most 2 x workers tasks in flight; inline for 1 worker."""
    bar = tqdm.tqdm(total=total, desc=desc, unit="shard", leave=False)
    if workers <= 1:
        if initializer is not None:
            initializer()
        for task in tasks:
            fn(*task)
            bar.update()
        bar.close()
        return
    with multiprocessing.get_context("spawn").Pool(workers, initializer=exit_with_parent,
                                                   initargs=(os.getpid(), initializer)) as pool:
        pending: collections.deque = collections.deque()
        for task in tasks:
            pending.append(pool.apply_async(fn, task))
            while len(pending) >= 2 * workers:
                pending.popleft().get()
                bar.update()
        while pending:
            pending.popleft().get()
            bar.update()
    bar.close()
