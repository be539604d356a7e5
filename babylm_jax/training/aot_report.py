"""A recipe's real train step lowered (CUDA) or compiled (TPU topology) ahead of time, from a CPU host.

    lines = cuda_report(config, dump_dir="runs/aot")     # every curriculum length, lowered for CUDA
    lines, fits = tpu_report(config, "v5e:2x2")          # compiled per chip: memory against HBM

The step is `step.make_train_step` exactly as training builds it (optimizer, masking,
accumulation, remat, the attention `model.attention` resolves to on the target), on abstract
inputs of the recipe's shapes; the masking ids are the tokenizer's fixed special ids.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
import types
from collections import Counter
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax._src.lib import cuda_versions

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import MeshConfig
from babylm_jax.core import outputs
from babylm_jax.core.atomic import atomic_write_text
from babylm_jax.core.vocab import MASK_ID, SPECIAL_PIECES
from babylm_jax.model import aux_heads
from babylm_jax.model.transformer import count_params
from babylm_jax.training import compiled, metrics, sharding, state
from babylm_jax.training.devices import GPUS, cuda_device, memory_bytes
from babylm_jax.training.optimizer import make_train_optimizer
from babylm_jax.training.step import make_masking, make_train_step, step_key

PLATFORMS = ("cuda", "tpu")
_TENSOR = re.compile(r"tensor<((?:\d+x)+)(f64|f32|bf16|f16|i64|i32|ui32|i16|ui16|i8|ui8|i1)>")
_BYTES = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "ui32": 4, "bf16": 2, "f16": 2, "i16": 2, "ui16": 2,
          "i8": 1, "ui8": 1, "i1": 1}


@dataclasses.dataclass(frozen=True)
class Step:
    """The parts of one train step: the jitted function and abstract (state, batch, rng)."""

    jitted: Any
    args: tuple
    model: Any


def masking_for(config: RunConfig):
    """The run's MaskingConfig from the tokenizer's fixed special ids (no tokenizer needed)."""
    stand_in = types.SimpleNamespace(mask_id=MASK_ID, vocab_size=config.model.vocab_size,
                                     special_ids=tuple(range(len(SPECIAL_PIECES))))
    return make_masking(config.data, stand_in)


def abstract_batch(config: RunConfig, sharding: Any = None) -> dict:
    """The train batch's shapes and dtypes, as the steps take them (`compiled.device_arrays`)."""
    shape = (config.train.batch_size, config.train.seq_len)
    keys = ["tokens", "segment_ids", "positions"] + (["word_starts"] if config.data.whole_word_masking else [])
    batch = {k: jax.ShapeDtypeStruct(shape, np.int32, sharding=sharding) for k in keys}
    return batch


def shapes_only_aux_objective(config: RunConfig) -> aux_heads.AuxObjective | None:
    """The run's auxiliary heads (train.aux_heads) as a compile sees them: their sizes, no labels (no tokenizer)."""
    return aux_heads.build_objective(config.train, None, config.model.vocab_size, config.model.family)


def cuda_step(config: RunConfig, length: int, device: Any = None) -> Step:
    """The train step at rows of `length` for one CUDA GPU, on abstract inputs (placed on the
    compile-only `device` when given)."""
    model = state.build_model(config.model, platform="cuda")
    optimizer = make_train_optimizer(config.train)
    init = state.boxed_init_fn(config, model, optimizer)
    abstract_state = jax.eval_shape(lambda rng: nn.meta.unbox(init(rng)), jax.random.key(0))
    step = make_train_step(config, model, optimizer, masking_for(config), length, platform="cuda", groups=1,
                           aux_objective=shapes_only_aux_objective(config))
    rng = jax.eval_shape(lambda: step_key(config.train))
    args = (abstract_state, abstract_batch(config), rng)
    if device is not None:
        on_device = jax.sharding.SingleDeviceSharding(device)
        args = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on_device), args)
    return Step(jax.jit(step, donate_argnums=(0,)), args, model)


def largest_tensors(text: str, top: int = 5) -> list[tuple[int, str, int]]:
    """(bytes, dtype[shape], occurrences) of the largest distinct tensor types in lowered StableHLO text."""
    counts = Counter(_TENSOR.findall(text))
    rows = []
    for (dims, dtype), n in counts.items():
        shape = [int(d) for d in dims.rstrip("x").split("x")]
        rows.append((int(np.prod(shape)) * _BYTES[dtype], f"{dtype}[{','.join(map(str, shape))}]", n))
    return sorted(rows, reverse=True)[:top]


def attention_line(model: Any, text: str, length: int) -> str:
    """The attention implementation the step uses, and whether float32 [B, H, L, L] scores remain."""
    heads = model.config.num_heads
    scores = sorted({m for m in re.findall(rf"tensor<(\d+)x{heads}x{length}x{length}xf32>", text)})
    held = f"float32 [B, H, L, L] scores at B = {', '.join(scores)}" if scores else "no float32 [B, H, L, L] scores"
    return f"attention {model.config.attention} ({text.count('__cudnn$fmha')} cuDNN fused-attention calls; {held})"


def dump(dump_dir: str | None, name: str, text: str) -> str | None:
    """Writes `text` to dump_dir/name (temp file, then rename); the path, or None without a dump_dir."""
    if not dump_dir:
        return None
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, name)
    with outputs.full_disk_errors(dump_dir, name, lambda: f"{len(text.encode()) / 1e6:,.1f} MB",
                                  "free some space or give --dump a folder on another disk"):
        atomic_write_text(path, text)
    return path


def cuda_report(config: RunConfig, gpu: str, dump_dir: str | None = None) -> tuple[list[str], bool]:
    """The train step at every curriculum length lowered for CUDA (attention, largest tensors, dumps)
    and compiled for GPU `gpu` (memory against its HBM); the last line `aot: fits=...`."""
    if state.build_model(config.model, platform="cuda").config.attention == "cudnn" and cuda_versions is None:
        raise ImportError('model.attention resolves to cudnn on CUDA, and tracing it needs cuDNN\'s libraries: '
                          'pip install -e ".[cuda12]" (no GPU needed)')
    device, hbm = cuda_device(gpu), memory_bytes(gpu)
    lines, worst = [], (0, 0)
    for length in compiled.curriculum_lengths(config.train, 0, config.train.num_steps):
        step = cuda_step(config, length, device)
        start = time.perf_counter()
        lowered = step.jitted.trace(*step.args).lower(lowering_platforms=("cuda",))
        text = lowered.as_text()
        if not lines:
            lines.append(f"aot: cuda, one {device.device_kind} ({compiled.size(hbm)}): "
                         f"{count_params(step.args[0].params):,} parameters; train state "
                         f"{compiled.size(state.state_bytes(step.args[0]))}; batch {config.train.batch_size} x "
                         f"{config.train.seq_len}, {config.train.grad_accum_steps} micro-batch(es)")
        tensors = ", ".join(f"{name} {compiled.size(b)} x{n}" for b, name, n in largest_tensors(text))
        where = dump(dump_dir, f"train_step_{length}.cuda.stablehlo.mlir", text)
        lines.append(f"rows of {length}: lowered in {time.perf_counter() - start:.1f} s; "
                     f"{attention_line(step.model, text, length)}; largest tensors: {tensors}"
                     + (f"; written to {where}" if where else ""))
        program = compiled.compile_program(f"rows of {length}", step.jitted, *step.args)
        lines.append(program.describe() + f" (XLA's GPU compiler for {device.device_kind})")
        worst = max(worst, (compiled.peak_bytes(program.memory), length))
    return lines + fits_lines(worst, hbm), worst[0] <= hbm


def fits_lines(worst: tuple[int, int], hbm: int | None) -> list[str]:
    """What to change when the largest program does not fit, and the `aot: fits=...` line."""
    peak, length = worst
    fits = hbm is None or peak <= hbm
    lines = [] if fits else [f"over by {compiled.size(peak - hbm)} at rows of {length}: lower train.batch_size, "
                             "raise train.grad_accum_steps or mesh.fsdp, or set model.remat='full'"]
    hbm_gb = hbm / 2**30 if hbm else float("nan")
    return lines + [f"aot: fits={'yes' if fits else 'no'} peak_gb={peak / 2**30:.2f} hbm_gb={hbm_gb:.2f}"]  # GiB


def check_platform(platform: str | None, mesh: MeshConfig) -> str:
    """--platform, else the recipe's mesh.target; ValueError naming the option and the choices."""
    chosen = platform or mesh.target
    if not chosen:
        raise ValueError(f"--platform is required (one of {', '.join(PLATFORMS)}): the config names no mesh.target")
    if chosen not in PLATFORMS:
        source = f"--platform={platform}" if platform else f"config key mesh.target={chosen!r}"
        raise ValueError(f"{source}: not one of {', '.join(PLATFORMS)}")
    return chosen


# HBM per chip by device_kind (vendor figures), longer names first where one contains another.
TPU_HBM_GB = {"TPU v5 lite": 16, "TPU v5e": 16, "TPU v5p": 95, "TPU v5": 95, "TPU v6 lite": 32, "TPU v4": 32}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def check_topology(topology: str | None, mesh: MeshConfig, platform: str) -> str:
    """--topology, else the recipe's mesh.topology, else (cuda) an H100; ValueError naming the option."""
    chosen = topology or mesh.topology or ("h100" if platform == "cuda" else "")
    if not chosen:
        raise ValueError("--topology is required for --platform=tpu (e.g. v5e:2x2, v5p:2x2x4): the config names no "
                         "mesh.topology")
    if platform == "cuda" and chosen not in GPUS:
        raise ValueError(f"--topology={chosen}: not a GPU this command knows (choices: {', '.join(GPUS)})")
    return chosen


def tpu_devices(topology: str) -> list:
    """The compile-only devices of a TPU topology (libtpu); ImportError/ValueError a user can act on."""
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise ImportError('--platform=tpu needs libtpu: pip install -e ".[tpu]"') from None
    from jax.experimental import topologies

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile-only: no chip to hold, so no lockfile
    try:
        return list(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)
    except Exception as error:  # noqa: BLE001 - libtpu says what is wrong in its own words
        if "INVALID_ARGUMENT" not in str(error):
            raise ValueError(f"--topology={topology}: libtpu could not build it: {cli_line(error)}") from None
        raise ValueError(f"--topology={topology}: not a TPU topology libtpu knows (names such as v5e:2x2, v5e:4x4, "
                         f"v5p:2x2x4, v4:2x2x2, v6e:2x2): {cli_line(error)}") from None


def refused_bytes(message: str) -> int:
    """The memory a RESOURCE_EXHAUSTED compile error says the program needs ("... (45.85G) exceeds ...")."""
    found = re.search(r"\(([\d.]+)([KMG])\) exceeds", message)
    if not found:
        return 2**62
    return int(float(found.group(1)) * {"K": 2**10, "M": 2**20, "G": 2**30}[found.group(2)])


def cli_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def hbm_bytes(device_kind: str) -> int | None:
    for name, gb in TPU_HBM_GB.items():
        if name.lower() in device_kind.lower():
            return gb * 2**30
    return None


def tpu_step(config: RunConfig, devices: list, length: int) -> Step:
    """The train step at rows of `length` sharded over `devices` as the recipe shards it."""
    mesh = sharding.make_mesh(config.mesh, devices)
    sharding.check_batch_size(config.train.batch_size, mesh)
    model = state.build_model(config.model, platform="tpu")
    optimizer = make_train_optimizer(config.train)
    _, state_shardings, abstract_state = state.sharded_init(config, model, optimizer, mesh)
    batch_sharding = sharding.batch_sharding(mesh)
    step = make_train_step(config, model, optimizer, masking_for(config), length, platform="tpu",
                           groups=len(devices), aux_objective=shapes_only_aux_objective(config))
    jitted = jax.jit(step, in_shardings=(state_shardings, batch_sharding, None),
                     out_shardings=(state_shardings, sharding.replicated(mesh)), donate_argnums=(0,))
    rng = jax.eval_shape(lambda: step_key(config.train))
    return Step(jitted, (abstract_state, abstract_batch(config, batch_sharding), rng), model)


def step_tflops(config: RunConfig, model: Any, length: int) -> float:
    """Training TFLOP of one step at rows of `length` (all devices), by training/metrics.py's convention."""
    share = metrics.predicted_share(config, max(config.train.mask_rate, config.train.mask_rate_final))
    per_token = metrics.train_flops_per_token(model.config, length, metrics.causal_share(config), share)
    return per_token * config.train.batch_size * config.train.seq_len / 1e12


def collectives(hlo_text: str) -> str:
    counts = {name: len(re.findall(rf"= \S+ {name}(?:-start)?\(", hlo_text)) for name in COLLECTIVES}
    return ", ".join(f"{name} x{n}" for name, n in counts.items() if n) or "none"


def tpu_report(config: RunConfig, topology: str, dump_dir: str | None = None) -> tuple[list[str], bool]:
    """The train step at every curriculum length compiled for `topology`: per-chip memory against
    HBM, FLOPs and collectives; the last line `aot: fits=yes|no peak_gb=X hbm_gb=Y`."""
    devices = tpu_devices(topology)
    kind = devices[0].device_kind
    hbm = hbm_bytes(kind)
    lines = [f"aot: tpu {topology}: {len(devices)} x {kind} ({compiled.size(hbm) if hbm else 'HBM unknown'} HBM each); "
             f"batch {config.train.batch_size} x {config.train.seq_len}, mesh.fsdp={config.mesh.fsdp}"]
    worst = (0, 0)
    for length in compiled.curriculum_lengths(config.train, 0, config.train.num_steps):
        step = tpu_step(config, devices, length)
        try:
            program = compiled.compile_program(f"rows of {length}", step.jitted, *step.args)
        except jax.errors.JaxRuntimeError as error:
            if "RESOURCE_EXHAUSTED" not in str(error):
                raise
            lines.append(f"rows of {length}: the TPU compiler refused it: {cli_line(error)}")
            worst = max(worst, (refused_bytes(str(error)), length))
            continue
        text = program.executable.as_text()
        xla_flops = (program.executable.cost_analysis() or {}).get("flops", float("nan"))
        where = dump(dump_dir, f"train_step_{length}.tpu.hlo.txt", text)
        lines.append(f"{program.describe()} per chip; attention {step.model.config.attention}; "
                     f"{step_tflops(config, step.model, length) / len(devices):,.2f} TFLOP per chip a step "
                     f"(training/metrics.py; XLA's cost analysis, loop bodies once: {xla_flops / 1e12:,.2f}); "
                     f"collectives: {collectives(text)}"
                     + (f"; written to {where}" if where else ""))
        worst = max(worst, (compiled.peak_bytes(program.memory), length))
    return lines + fits_lines(worst, hbm), hbm is None or worst[0] <= hbm
