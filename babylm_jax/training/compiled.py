"""Every step shape compiled before step 1: the train step at each curriculum length and the eval step.

    programs = StepPrograms(run)
    for line in programs.compile_all(first_batch, eval_batches, lengths, step_rng, eval_params):
        print(line)                        # one line per program: seconds and XLA's memory analysis
    state, metrics = programs.train(length)(state, batch, step_rng)
    loss_sum, tokens = programs.eval(batch)(params, batch)

A compiled program refuses arguments of another shape instead of compiling again, so no
step of a run compiles after step 1: an out-of-memory at the last curriculum length shows
before the first step, not hours into the run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable

import jax

from babylm_jax.config.training import TrainConfig
from babylm_jax.training import sharding
from babylm_jax.training.run import Run
from babylm_jax.training.step import make_eval_step, make_train_step, seq_len_at


def curriculum_lengths(train: TrainConfig, first_step: int, last_step: int) -> list[int]:
    """The row lengths of steps first_step+1 .. last_step, in the order the run reaches them."""
    lengths: list[int] = []
    for step in range(first_step, last_step):
        length = seq_len_at(train, step)
        if length not in lengths:
            lengths.append(length)
    return lengths


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program: its name, the executable, compile seconds and memory (bytes; None if unknown)."""

    name: str
    executable: Any
    seconds: float
    memory: dict[str, int] | None

    def describe(self) -> str:
        if self.memory is None:
            return f"{self.name}: compiled in {self.seconds:.1f} s (no memory analysis on this backend)"
        m = {k: size(v) for k, v in self.memory.items()}
        return (f"{self.name}: compiled in {self.seconds:.1f} s; memory: arguments {m['arguments']}, outputs "
                f"{m['outputs']} (aliased {m['aliased']}), temporaries {m['temporaries']}, code {m['code']}; "
                f"peak ~{size(peak_bytes(self.memory))}")


def size(n: int) -> str:
    """Bytes in KiB, MiB or GiB."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def memory_of(compiled: Any) -> dict[str, int] | None:
    """XLA's memory analysis of a compiled program as a dict of byte counts, or None."""
    try:
        analysis = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError):
        return None
    if analysis is None:
        return None
    return {"arguments": int(analysis.argument_size_in_bytes), "outputs": int(analysis.output_size_in_bytes),
            "aliased": int(analysis.alias_size_in_bytes), "temporaries": int(analysis.temp_size_in_bytes),
            "code": int(analysis.generated_code_size_in_bytes)}


def peak_bytes(memory: dict[str, int]) -> int:
    """Arguments, outputs not aliased to (donated) arguments, and temporaries: the program's live bytes at most."""
    return memory["arguments"] + memory["outputs"] - memory["aliased"] + memory["temporaries"]


def compile_program(name: str, jitted: Callable, *args: Any) -> Program:
    """`jitted` lowered for `args` (arrays or ShapeDtypeStructs, their shardings kept) and compiled,
    under the mesh of their shardings (kernels XLA cannot partition, as splash attention, then
    split the batch over it with shard_map)."""
    start = time.perf_counter()
    mesh = _mesh_of(args)
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        compiled = jitted.lower(*args).compile()
    return Program(name, compiled, time.perf_counter() - start, memory_of(compiled))


def _mesh_of(args: Any) -> jax.sharding.Mesh | None:
    """The mesh of the first argument sharded over one (None when no argument is)."""
    for leaf in jax.tree.leaves(args):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding) and isinstance(sharding.mesh, jax.sharding.Mesh):
            return sharding.mesh
    return None


HOST_ONLY = ("words", "batch_words")  # batch entries the host counts words with; the steps never see them


def device_arrays(batch: dict) -> dict:
    """The entries of a data batch that the train and eval steps take."""
    return {k: v for k, v in batch.items() if k not in HOST_ONLY}


class StepPrograms:
    """The run's train step per row length and its eval step, compiled up front (`compile_all`)."""

    def __init__(self, run: Run):
        self.run = run
        self._train: dict[int, Program] = {}
        self._eval: dict[tuple, Program] = {}

    def _jitted_train(self, length: int) -> Callable:
        run = self.run
        return jax.jit(make_train_step(run.config, run.model, run.optimizer, run.masking, length,
                                       aux_objective=run.aux_objective),
                       in_shardings=(run.state_shardings, sharding.batch_sharding(run.mesh), None),
                       out_shardings=(run.state_shardings, sharding.replicated(run.mesh)), donate_argnums=(0,))

    def compile_all(self, train_batch: dict, eval_batches: list[dict], lengths: list[int], rng: jax.Array,
                    eval_params: Any) -> list[str]:
        """Compiles the train step at each of `lengths` for `train_batch`'s shapes and the eval step
        for each distinct shape of `eval_batches` (global arrays); one line per program and a total."""
        start = time.perf_counter()
        for length in lengths:
            self._train[length] = compile_program(f"train step, rows of {length}", self._jitted_train(length),
                                                  self.run.state, train_batch, rng)
        eval_step = jax.jit(make_eval_step(self.run.config, self.run.model, self.run.masking))
        for batch in eval_batches:
            key = shape_key(batch)
            if key not in self._eval:
                rows, length = batch["tokens"].shape
                self._eval[key] = compile_program(f"eval step, {rows} x {length}", eval_step, eval_params, batch)
        programs = [*self._train.values(), *self._eval.values()]
        return [p.describe() for p in programs] + [
            f"compiled {len(programs)} programs before step 1 in {time.perf_counter() - start:.1f} s"]

    def train(self, length: int) -> Callable:
        if length not in self._train:
            raise RuntimeError(f"no train step was compiled for rows of {length} (compiled: {sorted(self._train)})")
        return self._train[length].executable

    def eval(self, batch: dict) -> Callable:
        return self._eval[shape_key(batch)].executable

    @property
    def count(self) -> int:
        return len(self._train) + len(self._eval)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in [*self._train.values(), *self._eval.values()])


def shape_key(batch: dict) -> tuple:
    return tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in batch.items()))
