"""Where a GPU train step's time goes, from this CPU: the real step compiled for an H200, its kernels
costed by a roofline, calibrated on the two steps measured on an H200, and the levers predicted.

    pip install -e ".[cuda12]"      # jax's CUDA plugin: compiles for CUDA without a GPU
    python experiments/benchmarks/gpu_step_anatomy.py                 # calibrate, anatomy, levers
    python experiments/benchmarks/gpu_step_anatomy.py --levers=false --out runs/anatomy

The step is `aot_report.cuda_step`, exactly as `train` builds it, at rows of 512, compiled by XLA's
GPU compiler for the H200 (`devices`); its optimised program is read kernel by kernel
(`step_anatomy`): tensor-core FLOPs of each matmul and cuDNN attention call, vector operations and HBM
bytes of each fusion (slices and in-place updates counted as what they touch), XLA's bitonic sort as
its passes, loop bodies times their trip counts. A kernel takes the slowest of FLOPs / 989.4 TFLOP/s,
bytes / 4.8 TB/s and operations / 33.5 Tops/s (the H200's datasheet), divided by one efficiency, plus
a 1 us launch; the step is their sum. The efficiency is the one constant fitted to the measurements:
the value that makes hybrid_100m's and causal_14m's predicted over measured step times right on
geometric average. The deterministic-ops slowdown is predicted out of sample (XLA compiled with
`xla_gpu_deterministic_ops`). The calibration compiles the recipes with the settings they had when
measured (AS_MEASURED); levers are config overrides on those, compiled the same way, and "recipe" is
the recipe as configs/ has it now. Each lever line gives the predicted step time, its tokens/s over the
measured settings', MFU (training/metrics.py's model FLOPs over 989.4 TFLOP/s) and XLA's memory
peak against the H200's 141 GB.

Custom calls (cuDNN attention, the Pallas kernels of `train.loss_kernel` and `model.norm_kernel`) are
not seen inside: each is costed at its known matmul FLOPs or the bytes of its operands and results,
whichever is slower, at the fitted efficiency (a floor; the tool prints so).

Ends with, one line each:
    predicted_step_ms[hybrid_100m]: P (measured 350.0)
    predicted_step_ms[causal_14m]: P (measured 34.9)
    predicted_slowdown[causal_14m_deterministic]: R (measured 1.28)
    predicted_mfu[hybrid_100m]: M (the recipe as configs/ has it; with the levers)
    predicted_mfu[causal_14m]: M
Writes anatomy.json (every kernel of every program) and levers.json under --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from babylm_jax.config.files import load_config_file  # noqa: E402
from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.config.training import AUX_HEADS  # noqa: E402
from babylm_jax.core.atomic import atomic_write_text  # noqa: E402
from babylm_jax.tools import step_anatomy  # noqa: E402
from babylm_jax.tools.hlo_program import parse_module  # noqa: E402
from babylm_jax.training import aot_report, compiled, devices  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
# The H200's measured steps (experiments/README.md, "GPU step anatomy": the first H200 run), rows of 512, and the settings
# the recipes had then: the calibration compiles these, whatever the recipes say now.
MEASURED_STEP_MS = {"hybrid_100m": 350.0, "causal_14m": 34.9}
XLA_KERNELS = {"train.loss_kernel": "xla", "model.norm_kernel": "xla"}
PALLAS_KERNELS = {"train.loss_kernel": "pallas", "model.norm_kernel": "pallas"}
NO_AUX_HEADS = {f"train.aux_heads.{head}": 0.0 for head in AUX_HEADS}  # the recipes were measured without them
RECIPE_KERNEL_LEVERS = {  # the recipe as configs/ has it, then each kernel on or off beside it
    "recipe": {},
    "recipe, loss_kernel=blockwise": {"train.loss_kernel": "blockwise"},
    "recipe, loss_kernel=pallas": {"train.loss_kernel": "pallas"},
    "recipe, norm_kernel=pallas": {"model.norm_kernel": "pallas"},
    "recipe, loss_kernel=pallas, norm_kernel=pallas": PALLAS_KERNELS,
    "recipe, loss_kernel=xla, norm_kernel=xla": XLA_KERNELS,
    "recipe, no aux heads": NO_AUX_HEADS,
}
AS_MEASURED = {
    "hybrid_100m": {"model.scan_layers": True, "model.remat": "dots_no_batch", "train.rng_impl": "threefry2x32",
                    "train.loss_logits_dtype": "float32", **XLA_KERNELS, **NO_AUX_HEADS},
    "causal_14m": {"model.scan_layers": True, "model.remat": "none", "train.loss_logits_dtype": "float32",
                   **XLA_KERNELS, **NO_AUX_HEADS},
}
MEASURED_DETERMINISTIC_SLOWDOWN = 1.68 / 1.31  # causal_14m's training loop, median tokens/s without / with
DETERMINISTIC = {"xla_gpu_deterministic_ops": True}

# Levers: config overrides on the measured settings, each compiled and predicted; those named "recipe..."
# are overrides on the recipe as configs/ has it now ("recipe": none).
LEVERS = {
    "hybrid_100m": {
        "remat=dots": {"model.remat": "dots"},
        "remat=none": {"model.remat": "none"},
        "rng_impl=rbg": {"train.rng_impl": "rbg"},
        "loss_logits=bfloat16": {"train.loss_logits_dtype": "bfloat16"},
        "residual=bfloat16": {"model.residual_dtype": "bfloat16"},
        "scan_layers=false": {"model.scan_layers": False},
        "scan_layers=false, remat=none": {"model.scan_layers": False, "model.remat": "none"},
        **RECIPE_KERNEL_LEVERS,
    },
    "causal_14m": {
        "loss_logits=bfloat16": {"train.loss_logits_dtype": "bfloat16"},
        "loss_chunk=8192": {"train.loss_chunk": 8192},
        "batch_size=256": {"train.batch_size": 256},
        "scan_layers=false": {"model.scan_layers": False},
        **RECIPE_KERNEL_LEVERS,
        "deterministic, embed_grad=one_hot": {"model.embedding_grad": "one_hot"},
        "deterministic, recipe, embed_grad=one_hot": {"model.embedding_grad": "one_hot"},
    },
}
CUSTOM_CALLS_NOTE = ("custom calls (cuDNN attention, Pallas/Triton kernels): their insides are not seen; each is "
                     "costed at the slowest of its known matmul FLOPs and the bytes of its operands and results "
                     "(read and written once) at the fitted efficiency: a floor, not a measurement")


@dataclasses.dataclass
class Compiled:
    """One recipe variant compiled for the GPU: its kernels, model FLOPs and memory."""

    name: str
    kernels: list[step_anatomy.Kernel]
    model_tflop: float
    tokens: int
    peak_bytes: int
    seconds: float


def recipe_config(name: str, overrides: dict) -> RunConfig:
    config = load_config_file(REPO / "configs" / f"{name}.py")
    config.update_from_flattened_dict(overrides)
    return RunConfig.from_config(config)


def compile_variant(name: str, config: RunConfig, gpu: str, options: dict | None = None) -> Compiled:
    """The train step at rows of train.seq_len compiled for `gpu`, read into kernels."""
    start = time.perf_counter()
    step = aot_report.cuda_step(config, config.train.seq_len, devices.cuda_device(gpu))
    executable = step.jitted.lower(*step.args).compile(compiler_options=options or {})
    kernels = step_anatomy.step_kernels(parse_module(executable.as_text()))
    tflop = aot_report.step_tflops(config, step.model, config.train.seq_len)
    memory = compiled.memory_of(executable)
    return Compiled(name, kernels, tflop, config.train.batch_size * config.train.seq_len,
                    compiled.peak_bytes(memory) if memory else 0, time.perf_counter() - start)


def table(rows: list[tuple[str, float, int]], total: float, title: str) -> list[str]:
    lines = [f"  {title:34s} {'ms':>8s} {'share':>6s} {'launches':>9s}"]
    lines += [f"  {group:34s} {s * 1e3:8.2f} {s / total:6.1%} {n:9d}" for group, s, n in rows]
    return lines


def anatomy_lines(program: Compiled, gpu: step_anatomy.Gpu, efficiency: float, top: int) -> list[str]:
    total = step_anatomy.predicted_seconds(program.kernels, gpu, efficiency)
    model_s = program.model_tflop * 1e12 / gpu.matmul_flops
    lines = [f"{program.name}: predicted {total * 1e3:.1f} ms a step; model FLOPs at the datasheet peak "
             f"{model_s * 1e3:.1f} ms ({model_s / total:.0%} of the step: the MFU it predicts); "
             f"{sum(k.launches for k in program.kernels)} launches; XLA memory peak {program.peak_bytes / 2**30:.1f} GiB"]
    for key, title in (("part", "by part of the step"), ("kind", "by kernel kind"), ("bound", "by what bounds it")):
        lines += table(step_anatomy.summary(program.kernels, gpu, efficiency, key), total, title)
    lines.append(f"  largest {top} kernels (ms for all launches; matmul GFLOP, HBM MB, vector Gops per launch):")
    for k in sorted(program.kernels, key=lambda k: -k.seconds(gpu, efficiency))[:top]:
        lines.append(f"    {k.seconds(gpu, efficiency) * 1e3:7.2f} ms x{k.launches:<4d} {k.kind:11s} {k.part:30s} "
                     f"{k.name[:36]:36s} {k.matmul_flops / 1e9:8.1f} {k.bytes / 1e6:8.1f} {k.vector_ops / 1e9:6.2f}")
    return lines


def lever_line(base: Compiled, variant: Compiled, gpu: step_anatomy.Gpu, efficiency: float, hbm: int) -> dict:
    before = step_anatomy.predicted_seconds(base.kernels, gpu, efficiency)
    after = step_anatomy.predicted_seconds(variant.kernels, gpu, efficiency)
    return {"recipe": base.name, "lever": variant.name, "predicted_step_ms": after * 1e3,
            "speedup": before / after * (variant.tokens / base.tokens),
            "tokens_per_s": variant.tokens / after, "mfu": variant.model_tflop * 1e12 / after / gpu.matmul_flops,
            "peak_gib": variant.peak_bytes / 2**30, "fits": variant.peak_bytes <= hbm}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200", choices=sorted(step_anatomy.GPUS))
    parser.add_argument("--levers", default="true", choices=("true", "false"))
    parser.add_argument("--top", type=int, default=12, help="largest kernels listed per program")
    parser.add_argument("--out", default="runs/gpu_step_anatomy")
    parser.add_argument("--only", nargs="*", default=[], help="compile only these levers (names as in LEVERS)")
    args = parser.parse_args(argv)
    gpu, hbm = step_anatomy.GPUS[args.gpu], devices.memory_bytes(args.gpu)
    os.makedirs(args.out, exist_ok=True)

    programs = {name: compile_variant(name, recipe_config(name, AS_MEASURED[name]), args.gpu)
                for name in MEASURED_STEP_MS}
    deterministic = compile_variant("causal_14m deterministic", recipe_config("causal_14m", AS_MEASURED["causal_14m"]),
                                    args.gpu, DETERMINISTIC)
    efficiency = step_anatomy.fitted_efficiency(
        [(programs[n].kernels, ms / 1e3) for n, ms in MEASURED_STEP_MS.items()], gpu)
    print(f"gpu {gpu.name}: {gpu.matmul_flops / 1e12:.1f} TFLOP/s bf16 dense, {gpu.bandwidth / 1e12:.2f} TB/s, "
          f"{gpu.vector_ops / 1e12:.1f} Tops/s vector, {gpu.launch_s * 1e6:.0f} us a launch (datasheet); "
          f"fitted efficiency {efficiency:.3f} (the one constant: share of those rates kernels reach)")
    for program in [*programs.values(), deterministic]:
        print("\n".join(anatomy_lines(program, gpu, efficiency, args.top)), flush=True)
    print(CUSTOM_CALLS_NOTE)

    levers = []
    if args.levers == "true":
        for name, variants in LEVERS.items():
            for lever, overrides in variants.items():
                options = DETERMINISTIC if lever.startswith("deterministic") else None
                base = deterministic if options else programs[name]
                if args.only and lever not in args.only:
                    continue
                on_recipe = lever.startswith("recipe") or lever.startswith("deterministic, recipe")
                config = recipe_config(name, overrides if on_recipe else {**AS_MEASURED[name], **overrides})
                try:
                    variant = compile_variant(lever, config, args.gpu, options)
                except (KeyError, AttributeError, ValueError) as error:
                    print(f"lever {name} {lever}: not compiled ({type(error).__name__}: {error})")
                    continue
                row = lever_line(base, variant, gpu, efficiency, hbm)
                levers.append(row)
                custom = [k for k in variant.kernels if k.kind in ("custom call", "attention")]
                row["custom_call_ms"] = step_anatomy.predicted_seconds(custom, gpu, efficiency) * 1e3
                print(f"lever {name} {lever}: predicted {row['predicted_step_ms']:.1f} ms, {row['speedup']:.2f}x "
                      f"tokens/s over {base.name}, {row['tokens_per_s']:,.0f} tokens/s, MFU {row['mfu']:.2f}, "
                      f"peak {row['peak_gib']:.1f} GiB ({'fits' if row['fits'] else 'does not fit'}); custom calls "
                      f"{row['custom_call_ms']:.1f} ms", flush=True)

    atomic_write_text(os.path.join(args.out, "anatomy.json"), json.dumps(
        {"efficiency": efficiency, "gpu": dataclasses.asdict(gpu),
         "programs": {p.name: [dict(dataclasses.asdict(k), seconds=k.seconds(gpu, efficiency)) for k in p.kernels]
                      for p in [*programs.values(), deterministic]}}, indent=1))
    atomic_write_text(os.path.join(args.out, "levers.json"), json.dumps(levers, indent=1))
    predicted = {n: step_anatomy.predicted_seconds(p.kernels, gpu, efficiency) * 1e3 for n, p in programs.items()}
    slowdown = step_anatomy.predicted_seconds(deterministic.kernels, gpu, efficiency) / (predicted["causal_14m"] / 1e3)
    for name, ms in MEASURED_STEP_MS.items():
        print(f"predicted_step_ms[{name}]: {predicted[name]:.1f} (measured {ms})")
    print(f"predicted_slowdown[causal_14m_deterministic]: {slowdown:.2f} (measured {MEASURED_DETERMINISTIC_SLOWDOWN:.2f})")
    for row in levers:
        if row["lever"] == "recipe":
            print(f"predicted_mfu[{row['recipe']}]: {row['mfu']:.2f} (the recipe as configs/ has it; "
                  f"{row['predicted_step_ms']:.1f} ms a step)")


if __name__ == "__main__":
    main(sys.argv[1:])
