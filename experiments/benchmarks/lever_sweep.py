"""The speed levers of the train step, one row each: tokens/s, MFU and XLA's memory per (config, lever).

    python experiments/benchmarks/lever_sweep.py --configs configs/hybrid_100m.py configs/causal_14m.py \
        --levers baseline rng_rbg logits_bf16 remat_dots residual_bf16 rbg_logits_bf16 \
        --steps 5 --repeats 2 --out OUT/levers.json [--tag default] [--budget_s 210] [--compile_threads 4]
    XLA_FLAGS=--xla_gpu_deterministic_ops=true python experiments/benchmarks/lever_sweep.py \
        --configs configs/causal_14m.py --levers baseline one_hot_embedding_grad --tag deterministic --out ...

Each lever is a set of config keys (`LEVERS`) over the config's own values; a lever that changes
nothing for a config (the key already has that value, or the config never uses it: `applies`) is
recorded as skipped with the reason. The step is built as the trainer builds it
(`train_throughput.Bench`), compiled ahead of time, and timed on random packed batches at rows of
`train.seq_len`: `--repeats` runs of `--steps` steps, the best counts. MFU divides by the device's
bf16 dense peak (`training.peaks`, 989 TFLOP/s for an H100/H200; on a CPU the best known f32
matmul peak).

Order, for a run cut short: the baselines first (compiled together, then timed), then every other
lever, compiled in `--compile_threads` threads (XLA compiles with the GIL released) and timed one by
one in the order asked, each with nothing else running. Every finished row is written to `--out` at
once (rows of the same tag and label are replaced, other rows kept: several processes, e.g. one with
XLA's deterministic ops, add to one file), and a lever not started before `--budget_s` is recorded as
"skipped: budget". A lever that fails (out of memory, say) is recorded with its error; the next runs.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import sys
import time
import traceback
from typing import Any, Callable

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import train_throughput as tt  # noqa: E402
from babylm_jax.config import cli  # noqa: E402
from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.core.atomic import atomic_write_json  # noqa: E402
from babylm_jax.training import peaks  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Lever:
    """Config keys set over a recipe's own, and when they change anything for it."""

    overrides: dict[str, Any]
    applies: Callable[[RunConfig], str | None] = lambda config: None  # None, or why it changes nothing


def _needs_random_bits(config: RunConfig) -> str | None:
    if config.model.dropout == 0 and config.model.family == "causal":
        return "no random bits in this step (causal, no dropout)"
    return None


def _needs_remat(config: RunConfig) -> str | None:
    return "the recipe rematerialises nothing (model.remat='none')" if config.model.remat == "none" else None


def _needs_dropout(config: RunConfig) -> str | None:
    return "the recipe has no dropout" if config.model.dropout == 0 else None


LEVERS: dict[str, Lever] = {
    "baseline": Lever({}),
    "rng_rbg": Lever({"train.rng_impl": "rbg"}, _needs_random_bits),
    "logits_bf16": Lever({"train.loss_logits_dtype": "bfloat16"}),
    "remat_dots": Lever({"model.remat": "dots"}, _needs_remat),
    "residual_bf16": Lever({"model.residual_dtype": "bfloat16"}),
    "rbg_logits_bf16": Lever({"train.rng_impl": "rbg", "train.loss_logits_dtype": "bfloat16"},
                             _needs_random_bits),  # without random bits: logits_bf16's program
    "remat_none": Lever({"model.remat": "none"}, _needs_remat),
    "no_dropout": Lever({"model.dropout": 0.0}, _needs_dropout),
    "one_hot_embedding_grad": Lever({"model.embedding_grad": "one_hot"}),
    # the fused kernels (train.loss_kernel, model.norm_kernel) and the XLA forms without them
    "kernels_xla": Lever({"train.loss_kernel": "xla", "model.norm_kernel": "xla"}),
    "loss_blockwise": Lever({"train.loss_kernel": "blockwise"}),
    "loss_pallas": Lever({"train.loss_kernel": "pallas"}),
    "norm_pallas": Lever({"model.norm_kernel": "pallas"}),
    "kernels_pallas": Lever({"train.loss_kernel": "pallas", "model.norm_kernel": "pallas"}),
}


def lever_overrides(name: str) -> list[str]:
    """The lever's keys as `--config.a.b=v` overrides."""
    if name not in LEVERS:
        raise ValueError(f"--levers {name}: not one of {', '.join(LEVERS)}")
    return [f"--config.{key}={value}" for key, value in LEVERS[name].overrides.items()]


def unchanged_reason(name: str, base: RunConfig) -> str | None:
    """Why lever `name` changes nothing for the recipe `base` (None: it changes something)."""
    lever = LEVERS[name]
    if lever.overrides and all(_get(base, key) == value for key, value in lever.overrides.items()):
        return "the recipe's own value already"
    return lever.applies(base)


def _get(config: RunConfig, dotted: str) -> Any:
    section, key = dotted.split(".")
    return getattr(getattr(config, section), key)


def memory_figures(memory: Any) -> dict[str, int] | None:
    """XLA's memory analysis as bytes: arguments, temporaries, outputs, aliased and the peak they imply."""
    if memory is None:
        return None
    figures = {name: int(getattr(memory, f"{name}_size_in_bytes"))
               for name in ("argument", "temp", "output", "alias")}
    figures["peak"] = figures["argument"] + figures["temp"] + figures["output"] - figures["alias"]
    return figures


def merge_rows(path: pathlib.Path, rows: list[dict[str, Any]]) -> None:
    """Writes `rows` into the JSON list at `path`, replacing rows of the same (tag, config, lever)."""
    existing = json.loads(path.read_text()) if path.is_file() else []
    keys = {(r["tag"], r["config"], r["lever"]) for r in rows}
    kept = [r for r in existing if (r["tag"], r["config"], r["lever"]) not in keys]
    atomic_write_json(path, kept + rows)


@dataclasses.dataclass
class Job:
    """One (config, lever) of the sweep and, once built, its bench."""

    config_path: str
    lever: str
    config: RunConfig | None = None
    bench: Any = None
    row: dict[str, Any] = dataclasses.field(default_factory=dict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument("--levers", nargs="+", default=["baseline"], help=f"of: {', '.join(LEVERS)}")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", required=True, help="JSON list of rows (merged with what is there)")
    parser.add_argument("--tag", default="default", help="names the conditions, e.g. 'deterministic'")
    parser.add_argument("--budget_s", type=float, default=None, help="start no lever after this many seconds")
    parser.add_argument("--compile_threads", type=int, default=4)
    args, overrides = parser.parse_known_args()
    unknown = [arg for arg in overrides if not arg.startswith("--config.")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for name in args.levers:
        lever_overrides(name)  # names an unknown lever before anything compiles
    started = time.perf_counter()
    out = pathlib.Path(args.out)
    peak, peak_source = peaks.device_peak_flops()
    common = {"tag": args.tag, "xla_flags": os.environ.get("XLA_FLAGS", ""), "device": jax.devices()[0].device_kind,
              "backend": jax.default_backend(), "jax": jax.__version__, "peak_flops": peak, "peak_source": peak_source,
              "steps": args.steps, "repeats": args.repeats}
    print(f"lever sweep [{args.tag}]: {jax.device_count()} x {common['device']}, peak {peak / 1e12:,.1f} TFLOP/s "
          f"({peak_source}); XLA_FLAGS={common['xla_flags']!r}", flush=True)

    jobs = [Job(path, lever) for lever in args.levers for path in args.configs]  # interleaved: lever by lever
    bases = {path: tt.load_config(path, overrides) for path in args.configs}
    for job in jobs:
        job.row = {**common, "config": job.config_path, "lever": job.lever, "keys": LEVERS[job.lever].overrides}
        reason = None if job.lever == "baseline" else unchanged_reason(job.lever, bases[job.config_path])
        if reason:
            job.row["status"] = f"skipped: {reason}"
    todo = [job for job in jobs if "status" not in job.row]
    merge_rows(out, [job.row for job in jobs if "status" in job.row])

    def over_budget() -> bool:
        return args.budget_s is not None and time.perf_counter() - started > args.budget_s

    def build(job: Job) -> None:
        """Traces and lowers in this (the main) thread; `compile` may then run in another."""
        job.config = tt.load_config(job.config_path, overrides + lever_overrides(job.lever))
        job.bench = tt.Bench(job.config_path, job.config, job.config.train.seq_len, seed=0)

    def fail(job: Job, error: BaseException) -> None:
        traceback.print_exception(error)
        job.row["status"] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        job.bench = None
        merge_rows(out, [job.row])

    def time_job(job: Job) -> None:
        bench = job.bench
        try:
            bench.start()
            for _ in range(args.repeats):
                bench.seconds.append(bench.run(args.steps))
        except Exception as error:  # noqa: BLE001  (an out-of-memory lever is a row, and the next runs)
            fail(job, error)
            return
        best = min(bench.seconds) / args.steps
        tokens_per_s = bench.tokens_per_step / best
        job.row.update(
            status="ran", family=bench.model_config.family, params=bench.num_params,
            batch=list(bench.shape), lower_s=round(bench.lower_s, 2), compile_s=round(bench.compile_s, 2),
            step_ms=round(1e3 * best, 3), step_ms_repeats=[round(1e3 * s / args.steps, 3) for s in bench.seconds],
            tokens_per_s=round(tokens_per_s, 1), flops_per_token=bench.flops_per_token,
            mfu=round(tokens_per_s * bench.flops_per_token / peak, 4), memory=memory_figures(bench.memory))
        print(f"[{args.tag}] {job.config_path} {job.lever}: step {job.row['step_ms']:.1f} ms, "
              f"{tokens_per_s:,.0f} tokens/s, MFU {job.row['mfu']:.3f}, compile {bench.compile_s:.1f} s", flush=True)
        bench.state = bench.batches = None  # frees the device memory before the next lever
        job.bench = None
        merge_rows(out, [job.row])

    def run_group(group: list[Job]) -> None:
        """Lowers each job of the group and hands its compile to a thread at once (compiles overlap the
        next lowering), then times each job alone, in order."""
        ready, futures = [], []
        with concurrent.futures.ThreadPoolExecutor(max(1, args.compile_threads)) as pool:
            for job in group:
                if over_budget():
                    job.row["status"] = "skipped: budget"
                    merge_rows(out, [job.row])
                    continue
                try:
                    build(job)
                except Exception as error:  # noqa: BLE001
                    fail(job, error)
                    continue
                ready.append(job)
                futures.append(pool.submit(job.bench.compile))
            for job, future in zip(ready, futures):
                try:
                    future.result()
                except Exception as error:  # noqa: BLE001
                    fail(job, error)
        for job in ready:
            if job.bench is None:
                continue
            if over_budget():
                job.row["status"] = "skipped: budget"
                merge_rows(out, [job.row])
                continue
            time_job(job)

    run_group([job for job in todo if job.lever == args.levers[0]])
    run_group([job for job in todo if job.lever != args.levers[0]])
    print(f"lever sweep [{args.tag}]: done in {time.perf_counter() - started:.0f} s; rows in {out}", flush=True)


if __name__ == "__main__":
    cli.report_errors("lever_sweep", main)
