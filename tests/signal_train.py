"""Runs the train CLI on a tiny 8-step config and sends itself a signal while a step's batch is read.

    python signal_train.py CORPUS_DIR WORKDIR SIGNAL STEP [NAN_AT_STEP]

(tests/test_reliability.py). SIGNAL "none" sends none; STEP 0 sends it while the data is set
up. With NAN_AT_STEP, the batch of that step makes the loss NaN.
"""
import os
import pathlib
import signal
import sys

from babylm_jax import train
from babylm_jax.training import run as run_lib


def main() -> None:
    corpus_dir, workdir, signal_name, at_step = sys.argv[1:5]
    nan_at = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    config_file = pathlib.Path(workdir).with_suffix(".config.py")
    config_file.write_text(
        "import pathlib, sys\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "from conftest import tiny_config\n\n\n"
        "def get_config():\n"
        f"    config = tiny_config(pathlib.Path({corpus_dir!r}))\n"
        "    config.train.update(num_steps=8, eval_every_steps=100)\n"
        "    config.checkpoint.every_steps = 4\n"
        "    return config\n"
    )
    real_build = run_lib.build_train_data

    def build_with_signal(*args, **kwargs):
        if int(at_step) == 0 and signal_name != "none":  # during setup, before any step
            os.kill(os.getpid(), getattr(signal, signal_name))
        data = real_build(*args, **kwargs)
        inner, count = data.train_iterator, [0]

        class Iterator:
            def __next__(self):
                batch = next(inner)
                count[0] += 1
                if count[0] == int(at_step) and signal_name != "none":
                    os.kill(os.getpid(), getattr(signal, signal_name))
                if count[0] == nan_at:
                    batch = {**batch, "tokens": batch["tokens"] * 0 + 10_000}  # embeddings of ids past the vocab: NaN
                return batch

            def get_state(self):
                return inner.get_state()

            def set_state(self, state):
                inner.set_state(state)

        data.train_iterator = Iterator()
        return data

    run_lib.build_train_data = build_with_signal
    sys.argv = ["train", f"--config={config_file}", f"--workdir={workdir}"]
    train.COMMAND.run(train.main)


if __name__ == "__main__":
    main()
