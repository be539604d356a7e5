"""The stop signals (SIGTERM, SIGINT, SIGHUP) while a command starts, before `config.cli` sets its own handlers.

`python -m babylm_jax.<command>` imports this package first; until then a SIGINT was a KeyboardInterrupt
traceback from inside some import (or, raised in a garbage-collection callback, ignored: the command went on
and exited 0), a SIGTERM an exit without a word. `stop_while_starting()` (run by the package's __init__ only
for such a command) makes any of them end it at once with one line and 128 + the signal's number, as any stop.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

from babylm_jax.core.stops import STOP_SIGNALS, say_stopped

PACKAGE = "babylm_jax"


def command_name() -> str | None:
    """The command being started (`python -m babylm_jax.evaluate ...` -> "evaluate"), else None: the
    package imported as a library, or by a module or tool outside it."""
    if sys.argv[:1] != ["-m"]:  # runpy sets argv[0] to "-m" while it imports the -m module's packages
        return None
    argv = getattr(sys, "orig_argv", [])
    module = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-m"), "")
    return module.rsplit(".", 1)[-1] if module.startswith(f"{PACKAGE}.") else None


def stop_while_starting() -> None:
    """Until the command sets its own handlers: any of STOP_SIGNALS ends it at once (nothing is done yet)."""
    name = command_name()
    if name is None:
        return

    def stop(signum: int, frame: Any) -> None:
        say_stopped(f"{name}: stopped by {signal.Signals(signum).name} while it started; nothing was done; run the "
                    "same command to start again")
        os._exit(128 + signum)  # no exception to land in an import or a callback that would swallow it

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
