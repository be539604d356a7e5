"""Pretrain a model: `python -m babylm_jax.train --config configs/base.py --workdir runs/base`.

Any config value can be overridden, e.g. `--config.train.num_steps=20`. Running the same
command on the same workdir resumes from its latest checkpoint. A user error is one line
and exit status 2 (`babylm_jax.config.cli`). The first line names the backend and devices, the next
whether the run is bit-exact there (train.deterministic) and what that costs; a recipe
made for an accelerator (`mesh.target`) refuses to start on a CPU backend unless --allow_cpu.
SIGTERM (preemption), Ctrl-C or a hang-up (SIGHUP: a closed terminal, a dropped ssh session) ends
the run after the current step with a checkpoint of it and one line saying so: exit status 143
(SIGTERM), 130 (SIGINT) or 129 (SIGHUP), 128 + the signal's number.
"""
from __future__ import annotations

import sys
from typing import Sequence

from absl import flags, logging

from babylm_jax.config import cli
from babylm_jax.config.schema import RunConfig
from babylm_jax.core import platforms
from babylm_jax.core.stops import say_stopped

COMMAND = cli.Command("train", __doc__)
_CONFIG = COMMAND.config("config", help_string="Path to an ml_collections config file, e.g. configs/base.py.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: checkpoints, tokenizer, token cache, metrics.",
                               flag_values=COMMAND.flags)
_ALLOW_CPU = flags.DEFINE_bool("allow_cpu", False, "Train a recipe made for an accelerator (mesh.target) on a CPU backend.",
                               flag_values=COMMAND.flags)
flags.mark_flags_as_required(["config", "workdir"], flag_values=COMMAND.flags)


def main(argv: Sequence[str]) -> dict:
    """Parses `argv` (program name first) and trains; returns the end-of-run summary."""
    COMMAND.parse(argv)
    config = RunConfig.from_config(_CONFIG.value)  # every key checked, once, before any work
    logging.set_verbosity(logging.WARNING)  # keep orbax's per-file INFO lines off the console
    if config.train.deterministic:
        platforms.use_deterministic_ops()  # before the backend starts (XLA reads its flags once, then)
    from babylm_jax.training import devices  # the heavy imports, after the options are checked
    from babylm_jax.training import loop, preemption

    print(f"train: {devices.describe_backend(config)}", flush=True)
    notice = devices.check_target(config, _ALLOW_CPU.value)  # before any work
    if notice:
        print(f"train: {notice}", flush=True)
    print(f"train: {devices.describe_determinism(config)}", flush=True)
    try:
        return loop.train_and_evaluate(config, _WORKDIR.value)
    except preemption.Stopped as stopped:  # SIGTERM (exit 143), SIGINT (130), SIGHUP (129): where to resume
        say_stopped(f"train: {stopped}")
        sys.exit(stopped.exit_status)


if __name__ == "__main__":
    COMMAND.run(main)
