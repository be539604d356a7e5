"""Pretraining throughput and MFU per model family, timed side by side in one process.

    python experiments/benchmarks/train_throughput.py        # configs/base.py, base_mlm.py, base_hybrid.py
    python experiments/benchmarks/train_throughput.py --configs configs/hybrid_100m.py --peak table \
        --lengths 512 128 --steps 5 --repeats 3               # one accelerator (see h200_check.sh)
    python experiments/benchmarks/train_throughput.py --memory_only --configs configs/causal_14m.py
    python experiments/benchmarks/train_throughput.py --config.model.num_layers=2 --config.train.batch_size=8

For each config it builds the train step exactly as the trainer does (`state.sharded_init`,
`optimizer.make_train_optimizer`, `sharding` meshes and shardings, `step.make_train_step` jitted
with the trainer's shardings and donation), compiles it ahead of time (`Bench.compile`; printing XLA's memory
analysis; `--memory_only` stops there, so recipes too large for this machine can be sized
without allocating anything), and times it on random packed batches of the config's shape
(documents of random length, so segment ids and positions look like real data). Repeats are interleaved over the
configs and a large jitted float32 matmul, so a busy machine slows all of them alike; the
best repeat of each is reported.

FLOPs per token are `training.metrics.train_flops_per_token`: multiply-add = 2, training =
3 x forward; forward = 2 x matmul weights + 2 x (MLM head transform + d_model x vocab, the tied
output projection) at the predicted positions (every one for causal models; the masked ones
at the config's starting mask rate for mlm, and also the causal rows' for hybrid) + attention
4 x seq_len x d_model per layer, halved for causal rows. Rematerialised recomputation and
the padding slots of the masked-only projection are not counted (model FLOPs).

Conditions (`conditions.py`): the f32 matmul peak is measured before every repeat; the run
reports its best against the best known idle peak of this machine kind, the load average
before and after, and a WARNING line when the run's peak is far below the best known.

Last lines: `mfu_vs_measured_peak[<family>]` (against this run's peak) and
`mfu_vs_idle_peak[<family>]` (against the best known idle peak: what an idle machine would
give if the step slows with the load as the matmul does; a lower bound otherwise) per
config; the tokens/s of each family over the causal one's, `<family>_over_causal_tokens`
(timed interleaved, best repeat of each); last, the lowest `mfu_vs_measured_peak`. With
`--peak table` the MFU lines divide by the device's bf16 dense peak from
`training.peaks.DEVICE_PEAK_FLOPS` (lines `mfu_vs_table_peak...`).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
import types
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from conditions import Conditions  # noqa: E402
from babylm_jax.config import cli  # noqa: E402
from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.core.vocab import MASK_ID, SPECIAL_PIECES  # noqa: E402
from babylm_jax.model.transformer import count_params  # noqa: E402
from babylm_jax.training import aot_report, metrics, peaks, sharding, state as state_lib, step as step_lib  # noqa: E402
from babylm_jax.training import optimizer as optimizer_lib  # noqa: E402
from babylm_jax.training.step import make_masking  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
CPU_CONFIGS = ("configs/base.py", "configs/base_mlm.py", "configs/base_hybrid.py")


def load_config(path: str, overrides: list[str]) -> RunConfig:
    """`get_config()` of a config file (a path, or relative to the repository) with `--config.a.b=v` overrides,
    typed."""
    file = pathlib.Path(path) if pathlib.Path(path).is_file() else REPO / path
    return RunConfig.from_config(cli.load_config(str(file), overrides))


def random_batch(rng: np.random.Generator, batch_size: int, seq_len: int, vocab_size: int) -> dict[str, np.ndarray]:
    """A packed batch of random documents (length ~ geometric, mean seq_len/2), as packing.py emits."""
    tokens = rng.integers(len(SPECIAL_PIECES), vocab_size, (batch_size, seq_len), dtype=np.int32)
    segment_ids = np.zeros((batch_size, seq_len), np.int32)
    positions = np.zeros((batch_size, seq_len), np.int32)
    for r in range(batch_size):
        start, segment = 0, 1
        while start < seq_len:
            length = min(seq_len - start, int(rng.geometric(2.0 / seq_len)))
            segment_ids[r, start:start + length] = segment
            positions[r, start:start + length] = np.arange(length)
            tokens[r, start] = 2  # [bos] opens each document
            start, segment = start + length, segment + 1
    return {"tokens": tokens, "segment_ids": segment_ids, "positions": positions}


class Bench:
    """One config's train step, compiled ahead of time from abstract shapes; `start` allocates."""

    def __init__(self, path: str, config: RunConfig, length: int, seed: int):
        self.path, self.config, self.length, self.seed = path, config, length, seed
        model = state_lib.build_model(config.model)
        self.model_config = model.config
        optimizer = optimizer_lib.make_train_optimizer(config.train)
        devices = sharding.run_devices(config.mesh, jax.devices())
        self.mesh = sharding.make_mesh(config.mesh, devices)
        stand_in = types.SimpleNamespace(mask_id=MASK_ID, vocab_size=config.model.vocab_size, special_ids=tuple(range(len(SPECIAL_PIECES))))
        masking = make_masking(config.data, stand_in)

        self.init, state_shardings, abstract_state = state_lib.sharded_init(config, model, optimizer, self.mesh)
        self.num_params = count_params(abstract_state.params)
        self.shape = (config.train.batch_size, config.train.seq_len)
        batch_sharding = sharding.batch_sharding(self.mesh)
        abstract_batch = {k: jax.ShapeDtypeStruct(self.shape, np.int32, sharding=batch_sharding)
                          for k in ("tokens", "segment_ids", "positions")}
        step = jax.jit(
            step_lib.make_train_step(config, model, optimizer, masking, length,
                                     aux_objective=aot_report.shapes_only_aux_objective(config)),
            in_shardings=(state_shardings, batch_sharding, None),
            out_shardings=(state_shardings, sharding.replicated(self.mesh)),
            donate_argnums=(0,),
        )
        self.rng = step_lib.step_key(config.train)  # of train.rng_impl, as a run takes it
        start = time.perf_counter()
        self.lowered = step.lower(abstract_state, abstract_batch, self.rng)
        self.lower_s = time.perf_counter() - start
        self.tokens_per_step = self.shape[0] * self.shape[1]
        self.flops_per_token = metrics.train_flops_per_token(
            self.model_config, length, metrics.causal_share(config), metrics.predicted_share(config, config.train.mask_rate))
        self.seconds: list[float] = []

    def compile(self) -> "Bench":
        """Compiles the lowered step (XLA releases the GIL: several benches may compile in threads)."""
        start = time.perf_counter()
        self.step = self.lowered.compile()
        self.compile_s = time.perf_counter() - start
        self.memory = self.step.memory_analysis()
        return self

    def start(self) -> None:
        """Allocates the state and two random batches, and runs the first (untimed) step."""
        self.state = self.init(jax.random.key(self.seed))
        rng = np.random.default_rng(self.seed)
        self.batches = [sharding.global_batch(random_batch(rng, *self.shape, self.config.model.vocab_size), self.mesh)
                        for _ in range(2)]
        self.run(1)

    def run(self, steps: int) -> float:
        """Seconds for `steps` consecutive steps, dispatched back to back and fetched once."""
        start = time.perf_counter()
        for i in range(steps):
            self.state, step_metrics = self.step(self.state, self.batches[i % 2], self.rng)
        loss = float(step_metrics["loss"])
        if not np.isfinite(loss):
            raise FloatingPointError(f"{self.path}: loss is {loss}")
        return time.perf_counter() - start

    def describe(self) -> str:
        c = self.model_config
        return (f"{self.path}: {c.family}, {self.num_params / 1e6:.2f}M params, d{c.d_model} x{c.num_layers}, "
                f"{c.dtype}, scan={c.scan_layers}, remat={c.remat}; batch {self.config.train.batch_size} x "
                f"{self.config.train.seq_len} tokens as rows of {self.length}"
                + (f" in {self.config.train.grad_accum_steps} passes" if self.config.train.grad_accum_steps > 1 else "")
                + f"; compile {self.compile_s:.1f}s")


def memory_line(memory: Any) -> str:
    if memory is None:
        return "memory analysis: not available on this backend"
    mb = lambda n: f"{n / 2**20:,.0f} MB"  # noqa: E731
    return (f"memory (XLA analysis): arguments {mb(memory.argument_size_in_bytes)} (state + batch), "
            f"temporaries {mb(memory.temp_size_in_bytes)}, outputs {mb(memory.output_size_in_bytes)} "
            f"(aliased to donated state {mb(memory.alias_size_in_bytes)})")


def labels_for(benches: list[Bench]) -> list[str]:
    """The family, or family:config-stem when several configs share a family."""
    families = [b.model_config.family for b in benches]
    return [f if families.count(f) == 1 else f"{f}:{pathlib.Path(b.path).stem}@{b.length}"
            for f, b in zip(families, benches)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CPU_CONFIGS))
    parser.add_argument("--lengths", type=int, nargs="*", default=None,
                        help="row lengths to time (sequence-length curriculum phases); default train.seq_len")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peak", choices=("measured", "table"), default="measured")
    parser.add_argument("--memory_only", action="store_true",
                        help="compile from abstract shapes and print XLA's memory analysis; allocate and time nothing")
    parser.add_argument("--matmul_n", type=int, default=2048, help="size of the square f32 matmul peak probe")
    parser.epilog = "Any --config.a.b=v is an override for every config, e.g. --config.model.num_layers=2."
    args, overrides = parser.parse_known_args()
    unknown = [arg for arg in overrides if not arg.startswith("--config.")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")

    conditions = Conditions.start(args.matmul_n)
    print(f"devices: {jax.device_count()} x {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    benches = []
    for path in args.configs:
        config = load_config(path, overrides)
        for length in args.lengths or [config.train.seq_len]:
            if length < 1 or config.train.seq_len % length:
                raise ValueError(f"--lengths {length}: must divide train.seq_len={config.train.seq_len} of {path}")
            bench = Bench(path, config, length, seed=len(benches)).compile()
            print(bench.describe())
            print("  " + memory_line(bench.memory))
            if not args.memory_only:
                bench.start()
            benches.append(bench)
    if args.memory_only:
        return

    for _ in range(args.repeats):
        conditions.probe()
        for bench in benches:
            bench.seconds.append(bench.run(args.steps))
    conditions.report()
    peak_flops = {"measured": conditions.run_peak, "idle": conditions.best_peak}
    if args.peak == "table":
        peak_flops = {"table": peaks.device_peak_flops()[0]}  # all devices
    print("peaks for MFU: " + ", ".join(f"{k} {v / 1e12:,.3f} TFLOP/s" for k, v in peak_flops.items()))

    labels = labels_for(benches)
    best_rates = {}
    for label, bench in zip(labels, benches):
        rates = [args.steps * bench.tokens_per_step / s for s in bench.seconds]
        best_rates[label] = max(rates)
        print(f"{label}: tokens/s best {best_rates[label]:,.0f} (repeats: {', '.join(f'{r:,.0f}' for r in rates)}); "
              f"{bench.flops_per_token / 1e6:,.2f} MFLOP/token; model {best_rates[label] * bench.flops_per_token / 1e9:,.1f} "
              f"GFLOP/s; step {1e3 * min(bench.seconds) / args.steps:,.1f} ms")
    mfu = {}
    for kind, peak in peak_flops.items():
        for label, bench in zip(labels, benches):
            mfu[kind, label] = best_rates[label] * bench.flops_per_token / peak
            print(f"mfu_vs_{kind}_peak[{label}]: {mfu[kind, label]:.2f}")
    if "causal" in best_rates:
        for label in labels:
            if label != "causal":
                print(f"{label}_over_causal_tokens: {best_rates[label] / best_rates['causal']:.2f}")
    kind = next(iter(peak_flops))
    print(f"mfu_vs_{kind}_peak: {min(m for (k, _), m in mfu.items() if k == kind):.2f}")


if __name__ == "__main__":
    cli.report_errors("train_throughput", main)
