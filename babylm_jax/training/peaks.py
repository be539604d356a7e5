"""Peak FLOP/s that MFU is measured against, and where each figure comes from.

Accelerators: a table of dense bf16 peaks keyed by `device_kind` (vendor figures, no sparsity).
CPUs: the best known idle float32 matmul peak of this CPU kind (a figure measured by hand,
or the best that `experiments/benchmarks/conditions.py` has cached), or, when none is known,
one measured at start-up, which a busy machine makes low (and MFU high): the source says which.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp

# Dense bf16 peak FLOP/s per device by device_kind substring; longer names first where one contains another.
DEVICE_PEAK_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,  # v5e
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,  # v6e (Trillium)
}

# Idle peaks measured by hand where no cache exists yet (2048^2 float32 probe, nothing else
# running; the measurements: experiments/README.md, its opening on the machine kind). Hosts report
# the same model name ("AMD EPYC") on different microarchitectures, so the key carries the CPU
# family and model: Zen 4 (family 25 model 17, AVX-512 on 256-bit units, 32 f32 FLOP a cycle a core).
KNOWN_IDLE_PEAKS = {"AMD EPYC (family 25 model 17) | 2 cores | cpu | f32 2048^2": 209e9}
PROBE_N = 2048  # the matmul size the idle peaks are keyed by


def measure_matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a large jitted float32 matmul on the default device (best of `repeats`)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


@functools.cache
def startup_peak(device_kind: str) -> float:
    """This process's start-up probe of `device_kind` (`measure_matmul_peak` at PROBE_N): measured
    once, so that later runs in the same process (a notebook, the test suite) do not pay ~5 s each."""
    return measure_matmul_peak(n=PROBE_N, repeats=3)


def cpu_name(cpuinfo: str) -> str:
    """`model name (family F model M)` of the first CPU in a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "cpu family", "model") and key not in fields:
            fields[key] = value.strip()
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def machine_kind(n: int) -> str:
    """The idle-peak key: CPU model with its family (one model name covers several generations),
    cores, JAX device kind and probe size."""
    try:
        cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return f"{cpu_name(cpuinfo)} | {os.cpu_count()} cores | {jax.devices()[0].device_kind.lower()} | f32 {n}^2"


def cache_path() -> pathlib.Path:
    return pathlib.Path(os.environ.get("BABYLM_PEAK_CACHE", "~/.cache/babylm_jax/peak.json")).expanduser()


def read_cache() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(cache_path().read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def table_peak(kind: str) -> float | None:
    """The table's per-device bf16 peak for `device_kind`, or None."""
    for name, peak in DEVICE_PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None


def device_peak_flops() -> tuple[float, str]:
    """Peak FLOP/s of the whole run (all devices) and where the figure came from.

    Accelerators: the table's per-device peak times the device count. CPUs (virtual CPU
    devices share the host's cores): the best known idle matmul peak of this CPU kind, or
    this process's start-up measurement (`startup_peak`) when it is higher or nothing is known,
    times the host count.
    """
    kind = jax.devices()[0].device_kind
    peak = table_peak(kind)
    if peak is not None:
        return peak * jax.device_count(), f"table ({kind}, bf16 dense)"
    measured = startup_peak(kind)
    key = machine_kind(PROBE_N)
    cached, hand = read_cache().get(key, 0.0), KNOWN_IDLE_PEAKS.get(key, 0.0)
    hosts = jax.process_count()
    if max(cached, hand) <= measured:
        return measured * hosts, (f"f32 matmul measured at start-up ({kind}; {measured / 1e9:.0f} GFLOP/s, no higher "
                                  f"idle figure known for {key}: a busy machine makes it low)")
    where = f"cache {cache_path()}" if cached >= hand else "training/peaks.py KNOWN_IDLE_PEAKS"
    return max(cached, hand) * hosts, (f"best known idle f32 matmul ({key}: {max(cached, hand) / 1e9:.0f} GFLOP/s, "
                                       f"{where}; {measured / 1e9:.0f} at start-up)")
