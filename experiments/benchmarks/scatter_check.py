"""Scatters against numpy, with and without XLA's deterministic GPU ops (jax#27796: `x.at[idx].set(v)`
gave wrong values under `--xla_gpu_deterministic_ops=true` when an index was 0).

    python experiments/benchmarks/scatter_check.py --out OUT/scatter_check.json [--sizes 4 4096 262144]

Runs itself twice in subprocesses, since XLA reads its flags when the backend starts: once with
XLA_FLAGS as given, once with `--xla_gpu_deterministic_ops=true` added. Each child computes, for
float32, bfloat16 and int32 operands and every size: `.at[idx].set(v)` and `.at[idx].add(v)` on 1-D
operands and on rows of a 2-D operand (the embedding gradient's shape), with unique indices (a
permutation that holds 0) and repeated ones, the vmapped (batched) add, the issue's own example,
and `babylm_jax.model.layers.one_hot_scatter_add` (the `model.embedding_grad=one_hot` sum). Each
result is compared with numpy's (`np.add.at` in float64 for sums; for a set with repeated indices,
any one of the values written to a slot is right) and computed twice to see if the two runs agree
bit for bit. A mismatch: a slot whose value is wrong beyond the dtype's rounding of the sum (sums)
or not exactly right (sets). The JSON holds per mode and case the worst error, the mismatch count
and run-to-run equality; the last lines say `mismatches[<mode>]: N`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
EPS = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -8, "int32": 0.0}


def sum_tolerance(dtype: str, abs_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
    """What a sum of `count` terms of this dtype may be off by, in any order of adding: the terms'
    magnitude times the dtype's rounding per addition (one_hot_scatter_add keeps ~16 bits: bf16 pairs)."""
    return EPS[dtype] * abs_sum * (np.maximum(count, 1) + 1) + 1e-30


def compare_sum(got: np.ndarray, want: np.ndarray, abs_sum: np.ndarray, count: np.ndarray, dtype: str) -> dict[str, Any]:
    error = np.abs(got.astype(np.float64) - want)
    bad = error > sum_tolerance(dtype, abs_sum, count)
    return {"max_abs_error": float(error.max()) if error.size else 0.0, "mismatches": int(bad.sum()), "slots": int(bad.size)}


def compare_set(got: np.ndarray, initial: np.ndarray, idx: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """Each written slot holds one of its written values; every other slot is unchanged."""
    got2 = got.reshape(got.shape[0], -1).astype(np.float64)
    ok = np.all(got2 == initial.reshape(initial.shape[0], -1), axis=1)
    vals2 = values.reshape(values.shape[0], -1).astype(np.float64)
    holds_write = np.all(got2[idx] == vals2, axis=1)  # per write: the slot holds this write's value
    written = np.bincount(idx, minlength=ok.size) > 0
    ok[written] = (np.bincount(idx, weights=holds_write, minlength=ok.size) > 0)[written]
    error = np.abs(got2 - _numpy_last_set(initial, idx, values).reshape(got2.shape))
    return {"max_abs_error": float(error.max()) if error.size else 0.0, "mismatches": int((~ok).sum()), "slots": int(ok.size)}


def _numpy_last_set(initial: np.ndarray, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = initial.astype(np.float64).copy()
    out[idx] = values  # numpy: the last write to a slot wins
    return out


def cases(sizes: list[int], seed: int) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """(name, run) for every case; `run` returns the comparison, with `bitwise_repeatable`."""
    import jax
    import jax.numpy as jnp

    from babylm_jax.model.layers import one_hot_scatter_add

    rng = np.random.default_rng(seed)
    found: list[tuple[str, Callable[[], dict[str, Any]]]] = []

    def twice(fn: Callable[..., Any], *args: Any) -> tuple[np.ndarray, bool]:
        compiled = jax.jit(fn)
        first, second = np.asarray(compiled(*args)), np.asarray(compiled(*args))
        return first, bool(np.array_equal(first.view(np.uint8), second.view(np.uint8)))

    def as_np(x: Any) -> np.ndarray:
        return np.asarray(jnp.asarray(x).astype(jnp.float32)) if x.dtype == jnp.bfloat16 else np.asarray(x)

    def issue_example() -> dict[str, Any]:
        arr = jnp.array([1, 2, 0, 0])
        got, same = twice(lambda a: jnp.zeros_like(a).at[jnp.arange(a.shape[0])].set(a), arr)
        return {"got": got.tolist(), "want": [1, 2, 0, 0], "mismatches": int((got != np.array([1, 2, 0, 0])).sum()),
                "slots": 4, "max_abs_error": float(np.abs(got - np.array([1, 2, 0, 0])).max()), "bitwise_repeatable": same}

    found.append(("issue_27796_example int32", issue_example))
    for size in sizes:
        for dtype in ("float32", "bfloat16", "int32"):
            for width in (None, 16):  # a 1-D operand, or rows of 16 (an embedding table's shape)
                for kind in ("unique", "repeated"):
                    def run(op: str, size: int = size, dtype: str = dtype, width: int | None = width,
                            kind: str = kind) -> dict[str, Any]:
                        n = size if kind == "unique" else 2 * size
                        idx = rng.permutation(size) if kind == "unique" else rng.integers(0, size, n)
                        idx[0] = 0  # the issue's trigger: an index of 0
                        shape = (n,) if width is None else (n, width)
                        base_shape = (size,) if width is None else (size, width)
                        if dtype == "int32":
                            values, initial = rng.integers(-100, 100, shape), rng.integers(-100, 100, base_shape)
                        else:
                            values, initial = rng.standard_normal(shape), rng.standard_normal(base_shape)
                        jdt = jnp.dtype(dtype)
                        values_j, initial_j, idx_j = jnp.asarray(values, jdt), jnp.asarray(initial, jdt), jnp.asarray(idx)
                        values64, initial64 = as_np(values_j).astype(np.float64), as_np(initial_j).astype(np.float64)
                        if op == "set":
                            got, same = twice(lambda x, i, v: x.at[i].set(v), initial_j, idx_j, values_j)
                            result = compare_set(as_np(got) if dtype == "bfloat16" else got, initial64, idx, values64)
                        else:
                            got, same = twice(lambda x, i, v: x.at[i].add(v), initial_j, idx_j, values_j)
                            want, abs_sum = initial64.copy(), np.abs(initial64)
                            np.add.at(want, idx, values64)
                            np.add.at(abs_sum, idx, np.abs(values64))
                            count = np.bincount(idx, minlength=size).reshape((size,) + (1,) * (want.ndim - 1))
                            result = compare_sum(as_np(got) if dtype == "bfloat16" else got, want, abs_sum, count, dtype)
                        return {**result, "bitwise_repeatable": same}

                    shape_name = "1d" if width is None else f"rows_x{width}"
                    for op in ("set", "add"):
                        found.append((f"{op} {kind} {shape_name} {dtype} n{size}", lambda run=run, op=op: run(op)))

        def batched_add(size: int = size) -> dict[str, Any]:
            batch = 4
            idx = rng.integers(0, size, (batch, 2 * size))
            idx[:, 0] = 0
            values = rng.standard_normal((batch, 2 * size)).astype(np.float32)
            got, same = twice(jax.vmap(lambda i, v: jnp.zeros(size, jnp.float32).at[i].add(v)), idx, values)
            want, abs_sum = np.zeros((batch, size)), np.zeros((batch, size))
            count = np.zeros((batch, size))
            for b in range(batch):
                np.add.at(want[b], idx[b], values[b].astype(np.float64))
                np.add.at(abs_sum[b], idx[b], np.abs(values[b]).astype(np.float64))
                count[b] = np.bincount(idx[b], minlength=size)
            return {**compare_sum(got, want, abs_sum, count, "float32"), "bitwise_repeatable": same}

        def one_hot(size: int = size) -> dict[str, Any]:
            num_rows, width = max(8, size // 8), 16
            ids = rng.integers(0, num_rows, size)
            ids[0] = 0
            rows = rng.standard_normal((size, width)).astype(np.float32)
            got, same = twice(lambda i, r: one_hot_scatter_add(i, r, num_rows), ids, rows)
            want, abs_sum = np.zeros((num_rows, width)), np.zeros((num_rows, width))
            np.add.at(want, ids, rows.astype(np.float64))
            np.add.at(abs_sum, ids, np.abs(rows).astype(np.float64))
            count = np.bincount(ids, minlength=num_rows)[:, None]
            return {**compare_sum(got, want, abs_sum, count, "bfloat16"), "bitwise_repeatable": same}

        found.append((f"vmapped add repeated 1d float32 n{size}", batched_add))
        found.append((f"one_hot_scatter_add float32 n{size}", one_hot))
    return found


def child(sizes: list[int]) -> dict[str, Any]:
    import jax

    results: dict[str, Any] = {"xla_flags": os.environ.get("XLA_FLAGS", ""), "backend": jax.default_backend(),
                               "device": jax.devices()[0].device_kind, "jax": jax.__version__, "cases": {}}
    for name, run in cases(sizes, seed=0):
        try:
            results["cases"][name] = run()
        except Exception as error:  # noqa: BLE001  (a case that cannot run is a finding too)
            results["cases"][name] = {"error": f"{type(error).__name__}: {error}"[:300]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 4096, 262144])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.sizes)))
        return
    report: dict[str, Any] = {}
    flags = os.environ.get("XLA_FLAGS", "").replace(DETERMINISTIC_FLAG, "").strip()
    for mode, mode_flags in (("default", flags), ("deterministic", f"{flags} {DETERMINISTIC_FLAG}".strip())):
        env = {**os.environ, "XLA_FLAGS": mode_flags}
        done = subprocess.run([sys.executable, __file__, "--child", "--out", args.out, "--sizes", *map(str, args.sizes)],
                              env=env, capture_output=True, text=True)
        if done.returncode:
            report[mode] = {"error": f"rc {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
            print(done.stderr[-3000:], file=sys.stderr)
            continue
        report[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    for mode, result in report.items():
        cases_ = result.get("cases", {})
        bad = {name: c for name, c in cases_.items() if c.get("mismatches") or "error" in c}
        unrepeatable = [name for name, c in cases_.items() if c.get("bitwise_repeatable") is False]
        for name, c in bad.items():
            what = c.get("error") or f"{c['mismatches']} of {c['slots']} slots wrong, max error {c['max_abs_error']:.3g}"
            print(f"[{mode}] {name}: {what}")
        print(f"[{mode}] {len(cases_)} cases, XLA_FLAGS={result.get('xla_flags', '?')!r}; not bit-repeatable: "
              f"{len(unrepeatable)}{' (' + ', '.join(unrepeatable[:6]) + ')' if unrepeatable else ''}")
    for mode, result in report.items():
        cases_ = result.get("cases", {})
        print(f"mismatches[{mode}]: {sum(c.get('mismatches', 0) for c in cases_.values()) if cases_ else 'none run'}")


if __name__ == "__main__":
    main()
