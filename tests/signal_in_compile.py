"""Runs a command and sends itself a signal while its main thread waits on an XLA compile.

    python signal_in_compile.py SIGNAL WITHIN MODULE ARGS...

(tests/test_command_signals.py). The signal goes at the first compile found under a call of the
function named WITHIN (e.g. "finetune"; "-" for any compile), so that it lands in that phase's compile.
"""
import importlib
import os
import signal
import sys
import threading
import time

from babylm_jax.config import cli


def _within(frame, name: str) -> bool:
    while frame is not None:
        if name == "-" or frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def main() -> None:
    signal_name, within, module_name, *args = sys.argv[1:]
    module = importlib.import_module(module_name)
    main_thread = threading.main_thread().ident

    def signal_in_the_compile() -> None:
        while True:
            frame = sys._current_frames().get(main_thread)
            if cli.in_xla_compile(frame) and _within(frame, within):
                os.kill(os.getpid(), getattr(signal, signal_name))
                return
            time.sleep(0.001)

    threading.Thread(target=signal_in_the_compile, daemon=True).start()
    sys.argv = [module_name.rsplit(".", 1)[-1], *args]
    module.COMMAND.run(module.main)


if __name__ == "__main__":
    main()
