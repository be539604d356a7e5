"""How a command stops on SIGTERM, SIGINT or SIGHUP: one line saying what is kept, exit status 128 + its number.

    stop_on_signals("nothing half-written is kept; ...")   # `cli.Command.run` does this for every command
    ...                                                     # a signal raises Stopped here, where that is safe

A signal that finds the main thread in an XLA compile, an import or other JAX code waits for it
(`stop_when_safe`), and a stop raised where Python ignores exceptions (a weakref or garbage-collection
callback, a __del__) is sent again (`_stop_ignored`): a stop is never lost. `config.cli` installs it for every
command; `training.preemption` defers it to a step boundary; `eval` keeps the tasks finished before it.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

# The signals whose default action ends a process and that a user or a system sends to end a command: a
# scheduler's preemption (SIGTERM), Ctrl-C (SIGINT), a closed terminal or a dropped ssh session (SIGHUP; none
# on Windows). SIGQUIT keeps its core dump, SIGUSR1/SIGUSR2 are left to the user, SIGKILL cannot be caught.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


def stop_exit_status(signum: int) -> int:
    """128 + the signal's number (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP), as shells report a command a
    signal ended: `train && evaluate` does not go on after a stopped train."""
    return 128 + int(signum)


class Stopped(BaseException):
    """A command stopped by one of STOP_SIGNALS; the message says what is kept and how to go on.

    A BaseException, like KeyboardInterrupt, so that `except Exception` blocks do not swallow it.
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return stop_exit_status(self.signum)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def say_stopped(line: str) -> None:
    """Prints a stop's line; where the terminal is gone (a hang-up: writes fail) nobody reads it, and the
    exit status stands (stdout then leads nowhere, so that the interpreter's last flush cannot change it)."""
    try:
        print(line, flush=True)
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - open until the process ends


def stop_behind(error: BaseException) -> "Stopped | None":
    """The Stopped that `error` was raised from or during, if any (its __cause__ and __context__ chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, Stopped):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


_XLA_COMPILER = os.path.join("jax", "_src", "compiler.py")  # the module whose calls wait on XLA's compiler
_JAX_CODE = os.sep + os.path.join("jax", "_src") + os.sep  # JAX's own code: bare `except:` there would swallow a stop
_IMPORT_MACHINERY = "<frozen importlib._bootstrap"  # the frames of an import under way
COMPILE = "the XLA compile under way"
SAFE_POLL_S = 0.005  # how soon a held stop follows the compile or import it waited for
INSISTING = 3  # the same signal this many times during a wait: the process ends at once


def unsafe_to_stop(frame: Any) -> str | None:
    """What `frame` (where a signal found the main thread) or a caller is in the middle of, when an exception
    raised there would do harm: an XLA compile (COMPILE), an import, or other JAX code (whose bare `except:`
    clauses would swallow the stop, and the command go on); None when a stop may be raised."""
    files = []
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    if any(name.endswith(_XLA_COMPILER) for name in files):
        return COMPILE
    if any(name.startswith(_IMPORT_MACHINERY) for name in files):
        return "the import under way"
    return "JAX's code under way" if any(_JAX_CODE in name for name in files) else None


def stop_when_safe(signum: int, frame: Any, message: str) -> None:
    """Raises Stopped(signum, message), unless the signal found the main thread in an XLA compile or an import.

    A compile left there goes on in XLA's own threads, and the interpreter's exit then frees the client
    under it: a segmentation fault (exit status 139, not 128 + signum); an import left there leaves a half
    initialised module and an ImportError ("initialization failed") that reads as a broken install. So
    the stop waits for them (a compile's wait said in one line on stderr), and a watcher thread sends the
    signal again once the main thread has left them, where this raises. The same signal INSISTING times
    ends the process at once, without the interpreter's shutdown (so without the crash), with 128 + signum."""
    busy = unsafe_to_stop(frame)
    if busy is None:
        _stops_waiting.pop(signum, None)  # a watcher of this signal has nothing left to send
        raise Stopped(signum, message)
    name = signal.Signals(signum).name
    if signum in _stops_waiting:  # said again meanwhile: its watcher sends it once; a third time ends at once
        _stops_waiting[signum] += 1
        if _stops_waiting[signum] >= INSISTING:
            print(f"{name} received {INSISTING} times: ending now, in {busy} (the files written so far are whole; "
                  "run the same command to start again)", file=sys.stderr, flush=True)
            os._exit(stop_exit_status(signum))  # no interpreter shutdown, so nothing frees XLA's client under it
        return
    if busy == COMPILE and not _stops_waiting:
        print(f"{name} received: stopping once {COMPILE} ends (send it {INSISTING} times to end now)",
              file=sys.stderr, flush=True)
    _stops_waiting[signum] = 1
    main_thread = threading.main_thread().ident

    def send_again_when_safe() -> None:
        while unsafe_to_stop(sys._current_frames().get(main_thread)):
            time.sleep(SAFE_POLL_S)
        if _stops_waiting.pop(signum, None):
            os.kill(os.getpid(), signum)

    threading.Thread(target=send_again_when_safe, name=f"{name} when safe", daemon=True).start()


_stops_waiting: dict[int, int] = {}  # signal -> times received while waiting for a compile or an import to end


def stop_on_signals(on_stop: str) -> None:
    """Each of STOP_SIGNALS raises Stopped (`stopped by SIGTERM; <on_stop>`) in the main thread, once any
    XLA compile, import or JAX code under way has ended (`stop_when_safe`), again where it was ignored."""
    def handle(signum: int, frame: Any) -> None:
        stop_when_safe(signum, frame, f"stopped by {signal.Signals(signum).name}; {on_stop}")

    global _earlier_unraisablehook
    for signum in STOP_SIGNALS:
        signal.signal(signum, handle)
    if sys.unraisablehook is not _stop_ignored:
        _earlier_unraisablehook, sys.unraisablehook = sys.unraisablehook, _stop_ignored


_earlier_unraisablehook = sys.unraisablehook  # what `_stop_ignored` hands every other ignored exception


def _stop_ignored(unraisable: Any) -> None:
    """A Stopped raised where Python ignores exceptions (a weakref or garbage-collection callback, a __del__)
    would be lost, the command going on to exit 0: the signal is sent again, to be raised after the callback
    (and again, should it land in one)."""
    if isinstance(unraisable.exc_value, Stopped):  # from a thread, a moment later: once the callback has returned
        threading.Timer(SAFE_POLL_S, os.kill, (os.getpid(), unraisable.exc_value.signum)).start()
        return
    _earlier_unraisablehook(unraisable)
