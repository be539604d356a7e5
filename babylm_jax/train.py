"""Pretrain a model: `python -m babylm_jax.train --config configs/base.py --workdir runs/base`.

Any config value can be overridden, e.g. `--config.train.num_steps=20`. Running the same
command on the same workdir resumes from its latest checkpoint.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from babylm_jax.training import trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to an ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: checkpoints, tokenizer, token cache, metrics.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # keep orbax's per-file INFO lines off the console
    try:
        trainer.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except (FileNotFoundError, ValueError) as error:  # bad input a user can fix: no traceback
        sys.exit(f"train failed: {error}")


if __name__ == "__main__":
    app.run(main)
