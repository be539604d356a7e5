"""Work for the prepare steps: cut into chunks of about N characters, run in a pool of processes.

Workers exit on their own when their parent dies (killed, or stopped by a signal), instead
of living on as orphans waiting for tasks. A worker that cannot start (its initializer, or
unpickling it, raises: a missing package, a broken install) says why to the parent and exits
quietly; the parent stops the pool at the first such report and raises WorkerStartError, one
line naming the error, instead of letting multiprocessing start new workers that fail again.
"""
from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

import tqdm

T = TypeVar("T")
_POLL_S = 0.1  # how often the parent looks for a worker's start failure while it waits for a result


class WorkerStartError(ChildProcessError):
    """The pool's workers could not start; the message names the error and a fix."""


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


def describe_start_failure(error: BaseException) -> str:
    """One line on why a worker could not start: the error's type and text, and for a missing module
    the package to install."""
    text = f"{type(error).__name__}: {' '.join(str(error).split())}"
    if isinstance(error, ModuleNotFoundError) and error.name:
        text += f"; install the package that provides {error.name!r} (pip install ...) where the workers run"
    return text


def exit_with_parent(parent_pid: int, failures=None, initializer: bytes | None = None, poll_s: float = 0.5) -> None:
    """Pool initializer: a daemon thread ends this worker once `parent_pid` is no longer its parent;
    then the pickled `initializer` runs. Where unpickling or running it raises, the worker puts one line
    saying why into `failures` (a SimpleQueue the parent watches) and exits at once, without a traceback."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    if initializer is None:
        return
    try:
        pickle.loads(initializer)()
    except BaseException as error:  # noqa: BLE001 - every failure is reported, and the worker ends
        if failures is None:
            raise
        failures.put(describe_start_failure(error))
        os._exit(1)


@contextlib.contextmanager
def _hang_ups_held() -> Iterator[None]:
    """Starts the pool's processes (and multiprocessing's resource tracker) with SIGHUP blocked, which they keep:
    a closed terminal hangs up its whole process group, and the tracker, which ignores only SIGINT and SIGTERM,
    died of it (tracebacks, "resource_tracker: process died unexpectedly"). The parent gets its own hang-up once
    they have started and stops them (`core.stops`); they end with it (`exit_with_parent`)."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _result(pending, failures, desc: str):
    """The result of the oldest task, waited for while watching for a worker that could not start."""
    while not pending.ready():
        if not failures.empty():
            raise WorkerStartError(f"the {desc} workers could not start: {failures.get()}")
        pending.wait(_POLL_S)
    return pending.get()


def run_tasks(
    fn: Callable, tasks: Iterable[tuple], workers: int, total: int | None, desc: str,
    initializer: Callable[[], None] | None = None,
) -> None:
    """Runs `fn(*task)` for every task with at most 2 x workers tasks in flight; inline for 1 worker.

    `initializer` runs once in each worker before its first task; where it raises in a worker, the pool
    stops and WorkerStartError names the error (with one worker it raises as it is)."""
    bar = tqdm.tqdm(total=total, desc=desc, unit="shard", leave=False)
    try:
        if workers <= 1:
            if initializer is not None:
                initializer()
            for task in tasks:
                fn(*task)
                bar.update()
            return
        context = multiprocessing.get_context("spawn")
        setup = pickle.dumps(initializer) if initializer is not None else None
        with _hang_ups_held():
            failures = context.SimpleQueue()
            pool = context.Pool(workers, initializer=exit_with_parent, initargs=(os.getpid(), failures, setup))
        with pool:
            pending: collections.deque = collections.deque()
            for task in tasks:
                pending.append(pool.apply_async(fn, task))
                while len(pending) >= 2 * workers:
                    _result(pending.popleft(), failures, desc)
                    bar.update()
            while pending:
                _result(pending.popleft(), failures, desc)
                bar.update()
    finally:
        bar.close()
