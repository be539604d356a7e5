"""Which JAX backends a command tries, chosen once when the package is imported (before jax is).

With libtpu installed (the `tpu` and `test` extras), JAX tries its TPU backend even on a host with
no TPU, and libtpu says so in five lines on stderr (TPU_ACCELERATOR_TYPE and TPU_WORKER_HOSTNAMES
warnings, an `E0000 ... INVALID_ARGUMENT`). On a Linux host with no accelerator device at all,
JAX_PLATFORMS=cpu spares every command (and its subprocesses) that start. A JAX_PLATFORMS the user
set, even empty, is left as it is; compiling for a TPU topology from this host (`babylm_jax.aot
--platform tpu`) loads libtpu itself and needs no TPU backend.

`use_deterministic_ops()` (config key train.deterministic) appends XLA's deterministic-ops flag to
XLA_FLAGS, which XLA reads once, when JAX starts its backend: called later it would do nothing, so
it raises instead.

XLA reads XLA_FLAGS once, and a flag it does not know (or a value it cannot read) ends the process in
XLA's own fatal line, exit 1, wherever that happens. `check_xla_flags()` lets XLA read them first in a
subprocess that loads only jaxlib (about 0.3 s, and only where XLA_FLAGS is set) and turns its refusal
into one line naming the variable; a value checked once is not checked again by this process's children.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import subprocess
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


DETERMINISTIC_OPS = "--xla_gpu_deterministic_ops=true"  # bit-exact GPU runs: no atomics in reductions and scatters


class BackendStarted(RuntimeError):
    """An XLA flag set after JAX started its backend, where it would silently do nothing."""


def backend_started() -> bool:
    """Whether JAX has started a backend in this process (XLA_FLAGS are read then, once)."""
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(xla_bridge is not None and xla_bridge.backends_are_initialized())


def use_deterministic_ops() -> None:
    """Appends DETERMINISTIC_OPS to XLA_FLAGS (the flags already there kept), before JAX starts its
    backend. Once a backend has started: nothing to do where the flag was set before it or where the
    backend is no GPU (the flag is XLA's GPU flag); BackendStarted on a GPU started without it."""
    flags = os.environ.get("XLA_FLAGS", "")
    if backend_started():
        import jax

        if DETERMINISTIC_OPS in flags.split() or jax.default_backend() not in ("gpu", "cuda", "rocm"):
            return
        raise BackendStarted(f"train.deterministic: JAX's backend has already started in this process, so "
                             f"{DETERMINISTIC_OPS} in XLA_FLAGS would do nothing; set it before jax.devices() or any "
                             "computation (the train command does)")
    if DETERMINISTIC_OPS not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {DETERMINISTIC_OPS}".strip()


def backend_error(error: BaseException) -> str | None:
    """The one line for a JAX_PLATFORMS that names a backend this host cannot start, or None for any other error.

    JAX raises RuntimeError ("Unable to initialize backend ...") for a backend that fails to start, and an
    AssertionError in its xla_bridge when none of those named has a plugin here (JAX_PLATFORMS=cuda, no CUDA plugin)."""
    if "JAX_PLATFORMS" not in os.environ:
        return None
    if isinstance(error, RuntimeError) and "Unable to initialize backend" in str(error):
        why = str(error)
    elif isinstance(error, AssertionError) and _raised_in(error, os.path.join("jax", "_src", "xla_bridge.py")):
        why = "JAX found none of these backends here (no plugin installed for them, or no device)"
    else:
        return None
    return (f"environment variable JAX_PLATFORMS={os.environ['JAX_PLATFORMS']!r}: {why}; unset it (JAX then uses "
            "the backends this host has) or name one it has, e.g. cpu")


def out_of_memory(error: BaseException) -> str | None:
    """The one line for a device that ran out of memory (XLA's RESOURCE_EXHAUSTED or "Out of memory
    allocating N bytes", at a buffer's allocation or a computation's dispatch), or None for any other error."""
    text = " ".join(str(error).split())
    if not isinstance(error, RuntimeError) or not ("RESOURCE_EXHAUSTED" in text or "Out of memory" in text):
        return None
    return (f"the device ran out of memory ({text[:200]}): the config asks for more than it holds; lower the model "
            "size or the batch sizes (model.remat trades compute for memory); `python -m babylm_jax.aot` checks a "
            "training config's fit without running it")


def _raised_in(error: BaseException, module_file: str) -> bool:
    """Whether `error` was raised by code in `module_file` (its traceback's last frame)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.endswith(module_file)


# XLA parses XLA_FLAGS when compile options are first built; jaxlib alone does it (older jaxlibs: xla_extension).
_XLA_FLAGS_PROBE = ("try:\n    import jaxlib._jax as xla\nexcept ImportError:\n    from jaxlib import xla_extension as xla\n"
                    "xla.CompileOptions()\n")
_XLA_FLAGS_CHECKED = "BABYLM_XLA_FLAGS_CHECKED"  # the XLA_FLAGS value a parent process checked


class XlaFlagsError(ValueError):
    """An XLA_FLAGS value XLA refuses; the message names the variable, XLA's reason and the fix."""


_probe: subprocess.Popen | None = None  # the check started while the command imports


def _xla_flags_unchecked() -> bool:
    flags = os.environ.get("XLA_FLAGS", "")
    return bool(flags) and os.environ.get(_XLA_FLAGS_CHECKED) != flags and not backend_started()


def start_xla_flags_check() -> None:
    """Starts XLA's reading of XLA_FLAGS in a subprocess, so that it runs while the command imports."""
    global _probe
    if _probe is None and _xla_flags_unchecked():
        try:
            _probe = subprocess.Popen([sys.executable, "-c", _XLA_FLAGS_PROBE], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
        except OSError:
            pass  # no verdict: JAX will read the flags itself


def check_xla_flags() -> None:
    """XlaFlagsError where XLA would refuse XLA_FLAGS (and end the command in its own fatal line); nothing
    to do where XLA_FLAGS is unset or empty, was checked by a parent process, or JAX already started."""
    global _probe
    if not _xla_flags_unchecked():
        return
    start_xla_flags_check()
    probe, _probe = _probe, None
    if probe is None:
        return
    try:
        _, stderr = probe.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        probe.kill()
        return
    reasons = re.findall(r"^[EF]\d{4} [^\]]*\] (.*)$", stderr, flags=re.MULTILINE)
    flags = os.environ["XLA_FLAGS"]
    if probe.returncode == 0 or not reasons:
        os.environ[_XLA_FLAGS_CHECKED] = flags
        return
    raise XlaFlagsError(f"environment variable XLA_FLAGS={flags!r}: XLA refuses it ({reasons[0].strip()}); remove or "
                        "correct that flag (XLA's own flags start with --xla_), or unset XLA_FLAGS")
