"""Lower or compile a recipe's train step for an accelerator this host does not have.

    python -m babylm_jax.aot --config configs/hybrid_100m.py --platform cuda [--topology h100] [--dump DIR]
    python -m babylm_jax.aot --config configs/hybrid_100m_tpu_pod.py --platform tpu [--topology v5p:2x2x4]

cuda: the real train step at every curriculum length lowered for CUDA, with the attention
implementation and the largest tensors with their dtypes, then compiled by XLA's GPU compiler
for an H100 or H200 (--topology h100|h200) with jax's CUDA plugin, no GPU needed
(pip install -e ".[cuda12]"): XLA's memory analysis against the GPU's memory. tpu: compiled
for a TPU topology with libtpu (pip install -e ".[tpu]"): per-chip memory against HBM, FLOPs
and collectives. Both end with `aot: fits=yes|no peak_gb=X hbm_gb=Y` (exit status 1 when it
does not fit); --dump writes each lowered (cuda) or compiled (tpu) module. Any config key can be
overridden (`--config.train.batch_size=64`); a user error is one line and exit status 2.
"""
from __future__ import annotations

import sys
import os
from typing import Sequence

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowers and compiles for a target; runs nothing on a device

from absl import flags

from babylm_jax.config import cli
from babylm_jax.config.schema import RunConfig
from babylm_jax.core import outputs

COMMAND = cli.Command("aot", __doc__)
_CONFIG = COMMAND.config("config", help_string="Path to an ml_collections config file, e.g. configs/hybrid_100m.py.")
_PLATFORM = flags.DEFINE_string("platform", None, "cuda or tpu (default: the recipe's mesh.target).",
                                flag_values=COMMAND.flags)
_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU topology (v5e:2x2, v5p:2x2x4, ...) or GPU (h100, h200); "
                                "default: the recipe's mesh.topology.",
                                flag_values=COMMAND.flags)
_DUMP = flags.DEFINE_string("dump", None, "Directory for the lowered modules (one file per curriculum length).",
                            flag_values=COMMAND.flags)
flags.mark_flags_as_required(["config"], flag_values=COMMAND.flags)


def main(argv: Sequence[str]) -> bool:
    """Parses `argv` and reports; returns whether the step fits the target's memory."""
    COMMAND.parse(argv)
    config = RunConfig.from_config(_CONFIG.value)  # every key checked, once, before the lowering
    if _DUMP.value:
        outputs.check_writable(_DUMP.value, "--dump")  # before the minutes of lowering and compiling
    from babylm_jax.training import aot_report  # the heavy imports, after the options are checked

    platform = aot_report.check_platform(_PLATFORM.value, config.mesh)
    topology = aot_report.check_topology(_TOPOLOGY.value, config.mesh, platform)
    report = aot_report.cuda_report if platform == "cuda" else aot_report.tpu_report
    lines, fits = report(config, topology, _DUMP.value)
    print("\n".join(lines), flush=True)
    return fits


if __name__ == "__main__":
    COMMAND.run(lambda argv: main(argv) or sys.exit(1))
