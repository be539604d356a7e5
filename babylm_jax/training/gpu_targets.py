"""Compile-only CUDA devices for `python -m babylm_jax.aot --platform cuda`: no GPU needed.

XLA's GPU compiler takes the device it compiles for as a `stream_executor.GpuTargetConfigProto`
(text format); jax's CUDA plugin builds a compile-only topology from one
(`topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=...)`).
The figures below are the vendor's public specifications of each GPU (SXM parts).
"""
from __future__ import annotations

from typing import Any

GPUS = {  # name -> (device_description, SMs, memory bytes, boost clock GHz, L2 bytes, memory bandwidth B/s)
    "h100": ("NVIDIA H100 80GB HBM3", 132, 80 * 10**9, 1.98, 50 * 2**20, 3.35e12),
    "h200": ("NVIDIA H200", 132, 141 * 10**9, 1.98, 50 * 2**20, 4.8e12),
}


def target_config(name: str) -> str:
    """The GpuTargetConfigProto text of GPU `name` (a key of GPUS; compute capability 9.0)."""
    description, cores, memory, clock, l2, bandwidth = GPUS[name]
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_block_optin: 232448
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: {cores}
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(bandwidth)}
  l2_cache_size: {l2}
  clock_rate_ghz: {clock}
  device_memory_size: {memory}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  cuda_compute_capability {{ major: 9 minor: 0 }}
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 patch: 0 }}
device_description_str: "{description}"
"""


def cuda_device(name: str) -> Any:
    """A compile-only CUDA device for GPU `name`; ValueError naming --topology and the choices, or
    ImportError when jax's CUDA plugin (the cuda12 extra) is missing."""
    if name not in GPUS:
        raise ValueError(f"--topology={name}: not a GPU this command knows (choices: {', '.join(GPUS)})")
    from jax._src import xla_bridge
    from jax.experimental import topologies

    xla_bridge.backends()  # discovers and registers the plugins
    if "cuda" not in xla_bridge._topology_factories:  # noqa: SLF001 - jax has no public probe for this
        raise ImportError('--platform=cuda compiles with jax\'s CUDA plugin: pip install -e ".[cuda12]" '
                          "(no GPU needed), or run with JAX_PLATFORMS=cpu if it is installed")
    topology = topologies.get_topology_desc(platform="cuda", topology_name=name, topology="1x1x1",
                                            target_config=target_config(name))
    return topology.devices[0]


def memory_bytes(name: str) -> int:
    return GPUS[name][2]
