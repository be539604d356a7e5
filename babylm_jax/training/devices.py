"""The devices a run trains on and those the compile-only reports compile for.

What a run trains on: the backend line that opens `train`, whether the run is bit-exact and at what
cost (train.deterministic), and recipes made for an accelerator started on a CPU (refused unless asked
for), or bf16 on a CPU (a notice).

Compile-only CUDA devices for `python -m babylm_jax.aot --platform cuda`, no GPU needed: XLA's GPU
compiler takes the device it compiles for as a `stream_executor.GpuTargetConfigProto` (text format);
jax's CUDA plugin builds a compile-only topology from one
(`topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=...)`).
The figures in GPUS are the vendor's public specifications of each GPU (SXM parts).
"""
from __future__ import annotations

from typing import Any

import jax

from babylm_jax.config.schema import RunConfig
from babylm_jax.model.attention import platform_of
from babylm_jax.model.loss import loss_chunk
from babylm_jax.training.state import build_model


INSTALL = {"cuda": 'pip install -e ".[cuda12]"', "tpu": 'pip install -e ".[tpu]"'}
# What determinism costs and what its absence allows on a GPU, as measured (docs/accelerators.md, "Bit-exact where").
DETERMINISTIC_COST = "measured -22% tokens/s for causal_14m on an H200"
NONDETERMINISTIC_DRIFT = "two fresh runs of causal_14m on an H200 differed by up to 0.0127 in loss by step 100"
# Under deterministic ops a scatter-add becomes a sort of every element (experiments/benchmarks/gpu_step_anatomy.py).
ONE_HOT_HINT = ("model.embedding_grad=one_hot keeps the embedding gradient fast under them (predicted for causal_14m: "
                "1.38x -> 1.12x the step time)")


def describe_backend(config: RunConfig) -> str:
    """JAX version, backend, devices and their kind, the attention, the loss (its chunks, or the kernel
    train.loss_kernel names), the fused norms where model.norm_kernel asks, and the model's dtype."""
    devices = jax.devices()
    platform = platform_of(jax.default_backend())
    attention = build_model(config.model, platform).config.attention
    interpret = " (Pallas in interpret mode on the CPU: slow)" if platform == "cpu" else ""
    kernel = config.train.loss_kernel
    if kernel == "xla":
        loss = f"loss chunks of {loss_chunk(platform, config.model.vocab_size, config.train.loss_chunk)} rows"
    else:
        loss = f"loss kernel {kernel}" + (interpret if kernel == "pallas" else "")
    norms = "" if config.model.norm_kernel == "xla" else f"norm kernel {config.model.norm_kernel}{interpret}, "
    return (f"JAX {jax.__version__}, backend {jax.default_backend()}: {len(devices)} x {devices[0].device_kind}"
            f" ({jax.process_count()} process(es)); attention {attention}, {loss}, {norms}"
            f"model.dtype {config.model.dtype}")


def describe_determinism(config: RunConfig) -> str:
    """Whether the run is bit-exact (fresh and resumed alike) on this backend, and the cost or the risk."""
    backend = jax.default_backend()
    if backend == "cpu":
        return "bit-exact: CPU runs are (train.deterministic changes nothing here)"
    if backend not in ("gpu", "cuda", "rocm"):
        return f"bit-exactness on {backend} is not measured here (train.deterministic sets XLA's GPU flag only)"
    if config.train.deterministic:
        hint = f"; {ONE_HOT_HINT}" if config.model.embedding_grad == "scatter" else ""
        return f"bit-exact: GPU with deterministic ops (train.deterministic; {DETERMINISTIC_COST}){hint}"
    return (f"not bit-exact: GPU without deterministic ops, so runs and resumes may differ slightly "
            f"({NONDETERMINISTIC_DRIFT}); --config.train.deterministic=true makes them bit-exact ({DETERMINISTIC_COST})")


def check_target(config: RunConfig, allow_cpu: bool) -> str | None:
    """None, or a one-line notice; ValueError when a recipe made for an accelerator (mesh.target)
    starts on a CPU backend without `allow_cpu`."""
    if jax.default_backend() != "cpu":
        return None
    target = config.mesh.target
    if target in INSTALL and not allow_cpu:
        raise ValueError(f"this recipe is made for {target} (config key mesh.target) and JAX's backend is cpu: "
                         f"install JAX for it ({INSTALL[target]}), or pass --allow_cpu to train on the CPU anyway")
    if target in INSTALL:
        return f"notice: a {target} recipe on the CPU, as --allow_cpu asks: expect it to be slow"
    if config.model.dtype == "bfloat16":
        return ("notice: model.dtype=bfloat16 on a CPU backend: CPUs have few fast bf16 matmuls, so this is "
                "usually slower than float32 here")
    return None


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
