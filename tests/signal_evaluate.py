"""Runs the evaluate CLI and sends itself a signal as the first task of a runner starts.

    python signal_evaluate.py SIGNAL RUNNER EVALUATE_ARGS...

(tests/test_command_signals.py). RUNNER names a `TaskRunner` member by its value ("minimal_pairs", "finetune").
"""
import os
import signal
import sys

from babylm_jax import evaluate
from babylm_jax.eval import runner
from babylm_jax.tasks.registry import TaskRunner


def main() -> None:
    signal_name, runner_name, *args = sys.argv[1:]
    at_runner = TaskRunner(runner_name)
    real = runner.RUNNERS[at_runner]

    def signalled(*task_args):
        os.kill(os.getpid(), getattr(signal, signal_name))  # the handler raises at the next bytecode
        return real(*task_args)

    runner.RUNNERS[at_runner] = signalled
    sys.argv = ["evaluate", *args]
    evaluate.COMMAND.run(evaluate.main)


if __name__ == "__main__":
    main()
