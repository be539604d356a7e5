"""Runs a command and sends itself a signal while its main thread waits on an XLA compile.

    python signal_in_compile.py SIGNAL WITHIN MODULE ARGS...

(tests/test_command_signals.py). The signal goes a few milliseconds into the first compile made under a
call of the function named WITHIN (e.g. "finetune"; "-" for any) that lasts that long, so that it lands
in that phase's compile.
"""
import importlib
import os
import signal
import sys
import threading

from jax._src import compiler

INTO_THE_COMPILE_S = 0.005


def _within(frame, name: str) -> bool:
    while frame is not None:
        if name == "-" or frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def main() -> None:
    signal_name, within, module_name, *args = sys.argv[1:]
    module = importlib.import_module(module_name)
    real_compile, sent, compiling = compiler.backend_compile_and_load, [], []

    def signal_if_still_compiling() -> None:
        if compiling and not sent:  # a compile shorter than INTO_THE_COMPILE_S: the next one is tried
            sent.append(signal_name)
            os.kill(os.getpid(), getattr(signal, signal_name))

    def compile_and_signal(*compile_args, **compile_kwargs):
        if sent or not _within(sys._getframe(), within):
            return real_compile(*compile_args, **compile_kwargs)
        compiling.append(True)
        threading.Timer(INTO_THE_COMPILE_S, signal_if_still_compiling).start()
        try:
            return real_compile(*compile_args, **compile_kwargs)
        finally:
            compiling.clear()

    compiler.backend_compile_and_load = compile_and_signal
    sys.argv = [module_name.rsplit(".", 1)[-1], *args]
    module.COMMAND.run(module.main)


if __name__ == "__main__":
    main()
