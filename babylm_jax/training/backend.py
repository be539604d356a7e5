"""What a run trains on: the backend line that opens `train`, whether the run is bit-exact and at what
cost (train.deterministic), and recipes made for an accelerator started on a CPU (refused unless asked
for), or bf16 on a CPU (a notice)."""
from __future__ import annotations

import jax

from babylm_jax.config.schema import RunConfig
from babylm_jax.model import objectives
from babylm_jax.model.attention import platform_of
from babylm_jax.training.state import build_model

INSTALL = {"cuda": 'pip install -e ".[cuda12]"', "tpu": 'pip install -e ".[tpu]"'}
# What determinism costs and what its absence allows on a GPU, as measured (README, "Exact where").
DETERMINISTIC_COST = "measured -22% tokens/s for causal_14m on an H200"
NONDETERMINISTIC_DRIFT = "two fresh runs of causal_14m on an H200 differed by up to 0.0127 in loss by step 100"
# Under deterministic ops a scatter-add becomes a sort of every element (experiments/benchmarks/gpu_step_anatomy.py).
ONE_HOT_HINT = ("model.embedding_grad=one_hot keeps the embedding gradient fast under them (predicted for causal_14m: "
                "1.38x -> 1.12x the step time)")


def describe_backend(config: RunConfig) -> str:
    """JAX version, backend, devices and their kind, the attention and the loss chunks this run uses."""
    devices = jax.devices()
    platform = platform_of(jax.default_backend())
    attention = build_model(config.model, platform).config.attention
    chunk = objectives.loss_chunk(platform, config.model.vocab_size, config.train.loss_chunk)
    return (f"JAX {jax.__version__}, backend {jax.default_backend()}: {len(devices)} x {devices[0].device_kind}"
            f" ({jax.process_count()} process(es)); attention {attention}, loss chunks of {chunk} rows, "
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
