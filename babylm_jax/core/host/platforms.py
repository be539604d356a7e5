"""Which JAX backends a command tries, chosen once when the package is imported (before jax is).

With libtpu installed (the `tpu` and `test` extras), JAX tries its TPU backend even on a host with
no TPU, and libtpu says so in five lines on stderr (TPU_ACCELERATOR_TYPE and TPU_WORKER_HOSTNAMES
warnings, an `E0000 ... INVALID_ARGUMENT`). On a Linux host with no accelerator device at all,
JAX_PLATFORMS=cpu spares every command (and its subprocesses) that start. A JAX_PLATFORMS the user
set, even empty, is left as it is; compiling for a TPU topology from this host (`babylm_jax.aot
--platform tpu`) loads libtpu itself and needs no TPU backend.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys

# The device files of the accelerators JAX runs on: TPU (v4, v5e: accel; v5p, v6e: vfio), NVIDIA GPU
# (WSL2: dxg), AMD GPU (kfd). Any of them present: JAX's own choice stands.
ACCELERATOR_DEVICES = ("/dev/accel*", "/dev/vfio", "/dev/nvidia*", "/dev/dxg", "/dev/kfd")


def has_accelerator_device() -> bool:
    return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICES)


def skip_absent_tpu() -> None:
    """JAX_PLATFORMS=cpu on a Linux host with libtpu installed but no accelerator device, unless the
    user chose JAX_PLATFORMS."""
    if "JAX_PLATFORMS" in os.environ or sys.platform != "linux" or has_accelerator_device():
        return
    if importlib.util.find_spec("libtpu") is not None:
        os.environ["JAX_PLATFORMS"] = "cpu"
