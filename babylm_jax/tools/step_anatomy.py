"""A compiled GPU train step's kernels, each costed by a roofline, and the step time they add to.

    kernels = step_kernels(parse_module(executable.as_text()))
    seconds = predicted_seconds(kernels, H200)

Every kernel the program launches (loop bodies counted once per trip) with its tensor-core FLOPs,
its vector-unit operations and the HBM bytes it moves. A custom call's inside is not seen: cuBLAS and
cuDNN calls take their FLOPs from their shapes, Pallas kernels (Triton, Mosaic GPU) the FLOPs of
their known matmuls (`fused_loss.KERNEL_MATMULS`) or none, and each is costed no cheaper than the
bytes of its operands and results: what it must read and write once. A kernel takes the longest of its three
times at the GPU's datasheet rates, plus one launch; the step is their sum (XLA's GPU runtime
runs them one after another on one stream). `efficiency` is the share of the datasheet rates
that kernels reach: the one constant fitted to measured steps.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from typing import Iterable

from babylm_jax.model.fused_loss import KERNEL_MATMULS
from babylm_jax.tools.hlo_program import Array, Computation, Instruction, Module

# Free on a GPU: no kernel (aliases, tuples, metadata) or run on the host.
FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "partition-id", "replica-id",
        "opt-barrier", "add-dependency", "domain", "copy-start", "copy-done", "send-done", "recv-done", "iota"}
# Inside a fusion: no arithmetic on the vector units.
NO_ARITHMETIC = FREE | {"broadcast", "reshape", "transpose", "slice", "dynamic-slice", "dynamic-update-slice",
                        "concatenate", "pad", "copy", "gather", "reverse", "select", "convert", "iota"}
TRANSCENDENTAL = {"exponential", "log", "log-plus-one", "exponential-minus-one", "tanh", "logistic", "rsqrt", "sqrt",
                  "power", "sine", "cosine", "erf", "divide", "atan2", "cbrt"}
TRANSCENDENTAL_OPS = 4  # a special-function unit result costs about four vector slots (SFU: 16 lanes vs 64/128)
SORT_TILE = 2048  # XLA's GPU sort: masks below this tile run together in shared memory (kTileSize)


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU's datasheet rates."""

    name: str
    matmul_flops: float  # dense bf16 tensor-core FLOP/s
    vector_ops: float  # 32-bit operations a second on the CUDA cores (SMs x lanes x clock)
    bandwidth: float  # HBM bytes a second
    launch_s: float  # one kernel launch on a busy stream (XLA's GPU performance model: 1 us; CUDA graphs less)


# NVIDIA H200 SXM: 989.4 TFLOP/s dense bf16, 4.8 TB/s HBM3e, 132 SMs x 128 FP32 lanes x 1.98 GHz.
H200 = Gpu("H200", 989.4e12, 132 * 128 * 1.98e9, 4.8e12, 1e-6)
H100 = Gpu("H100", 989.4e12, 132 * 128 * 1.98e9, 3.35e12, 1e-6)
GPUS = {"h200": H200, "h100": H100}


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel launch site: what it is, where in the step it comes from, and its work per launch."""

    name: str
    kind: str  # matmul, attention, sort, fusion, reduction, copy, ...
    part: str  # the step's part it serves (forward, backward, remat recompute, loss, random bits, optimizer)
    launches: int  # how many times a step runs it (loop trips)
    matmul_flops: float = 0.0
    vector_ops: float = 0.0
    bytes: float = 0.0

    def seconds(self, gpu: Gpu, efficiency: float = 1.0) -> float:
        """The step time of all its launches: the slowest of compute, vector work and memory, plus launches."""
        busy = max(self.matmul_flops / gpu.matmul_flops, self.vector_ops / gpu.vector_ops, self.bytes / gpu.bandwidth)
        return self.launches * (busy / efficiency + gpu.launch_s)

    def bound(self, gpu: Gpu) -> str:
        times = {"compute": self.matmul_flops / gpu.matmul_flops, "vector": self.vector_ops / gpu.vector_ops,
                 "memory": self.bytes / gpu.bandwidth}
        return max(times, key=times.get) if max(times.values()) > gpu.launch_s else "launch"


def predicted_seconds(kernels: Iterable[Kernel], gpu: Gpu, efficiency: float = 1.0) -> float:
    return sum(k.seconds(gpu, efficiency) for k in kernels)


def fitted_efficiency(programs: list[tuple[list[Kernel], float]], gpu: Gpu) -> float:
    """The one constant: the efficiency that makes predicted over measured step time right on average
    (the geometric mean of the per-program ratios is 1), found by bisection."""
    def log_error(efficiency: float) -> float:
        return sum(math.log(predicted_seconds(k, gpu, efficiency) / measured) for k, measured in programs)

    low, high = 1e-3, 1.0
    if log_error(high) > 0:
        return high
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if log_error(middle) > 0 else (low, middle)
    return math.sqrt(low * high)


RANDOM_BITS = re.compile(r"threefry|_uniform|_randint|_bernoulli|random_bits|random_wrap|rng_bit_generator")


def part_of(op_name: str) -> str:
    """The step's part an instruction serves, from its op_name metadata."""
    if RANDOM_BITS.search(op_name):
        return "random bits"
    if "rematted_computation" in op_name:
        return "remat recompute"
    if "jvp()" in op_name or "compute_loss" in op_name:  # outside the Transformer module: the head and the loss
        return "loss (logits, cross-entropy)"
    if "transpose(jvp" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "optimizer, EMA, norms"


def _op_name(instruction: Instruction) -> str:
    found = re.search(r'op_name="([^"]*)"', instruction.attributes)
    return found.group(1) if found else ""


def dot_flops(dot: Instruction, shapes: dict[str, tuple[Array, ...]]) -> float:
    """2 x output elements x contracted size of a `dot` instruction."""
    lhs = shapes[dot.operands[0]][0]
    contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", dot.attributes)
    size = math.prod(lhs.dims[int(d)] for d in contracting.group(1).split(",") if d) if contracting else 1
    return 2.0 * dot.result[0].elements * size


def gemm_call_flops(call: Instruction, shapes: dict[str, tuple[Array, ...]]) -> float:
    """FLOPs of a cuBLAS custom call: 2 x output elements x the lhs contracting size in its backend_config."""
    lhs = shapes[call.operands[0]][0]
    found = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', call.attributes)
    dims = [int(d.strip().strip('"')) for d in found.group(1).split(",") if d.strip()] if found else []
    return 2.0 * call.result[0].elements * math.prod(lhs.dims[d] for d in dims)


def attention_flops(call: Instruction, shapes: dict[str, tuple[Array, ...]]) -> float:
    """FLOPs of a cuDNN fused-attention call: 4 B H Lq Lk K forward (halved when causal), 2.5x that backward."""
    batch, q_len, heads, head_dim = shapes[call.operands[0]][0].dims
    kv_len = shapes[call.operands[1]][0].dims[1]
    flops = 4.0 * batch * heads * q_len * kv_len * head_dim
    if '"mask_type": "CAUSAL"' in call.attributes or '"mask_type":"CAUSAL"' in call.attributes:
        flops /= 2
    return flops * (2.5 if "Backward" in call.attributes else 1.0)


def custom_call_flops(name: str, call: Instruction, shapes: dict[str, tuple[Array, ...]]) -> float:
    """Tensor-core FLOPs of a Pallas kernel whose matmuls are known (`fused_loss.KERNEL_MATMULS`: its
    [N, D] rows times the [V, D] vocabulary), else none: it is then costed by its bytes alone."""
    if name not in KERNEL_MATMULS:
        return 0.0
    (rows, width), vocab = shapes[call.operands[0]][0].dims, shapes[call.operands[1]][0].dims[0]
    return KERNEL_MATMULS[name] * 2.0 * rows * vocab * width


def bitonic_passes(n: int, element_bytes: float) -> tuple[int, float]:
    """(kernels, bytes) of XLA's GPU bitonic sort of `n` elements: masks at or above the shared-memory
    tile run one kernel each over the whole array; runs of smaller masks run as one tiled kernel."""
    stages = max(1, math.ceil(math.log2(max(n, 2))))
    tile = min(SORT_TILE, 1 << stages)
    kernels, in_tile_run = 0, False
    for stage in range(stages):
        for mask in [(1 << (stage + 1)) - 1] + [1 << m for m in range(stage - 1, -1, -1)]:
            if mask < tile:
                kernels += 0 if in_tile_run else 1
                in_tile_run = True
            else:
                kernels, in_tile_run = kernels + 1, False
    return kernels, kernels * 2.0 * n * element_bytes


def _read_bytes(fused: Computation, index: int, operand: tuple[Array, ...]) -> float:
    """HBM bytes a fusion reads of its operand `index`: the slices when only sliced, none when it is
    the buffer a dynamic-update-slice root writes in place, else all of it."""
    parameter = next((i for i in fused.instructions if i.parameter_number == index), None)
    whole = sum(a.bytes for a in operand)
    if parameter is None:
        return whole
    users = [i for i in fused.instructions if parameter.name in i.operands]
    if users and all(u.opcode in ("dynamic-slice", "slice", "gather") and u.operands[0] == parameter.name
                     for u in users):
        return min(whole, sum(u.result_bytes for u in users))
    if users and all(u.opcode == "dynamic-update-slice" and u.operands[0] == parameter.name for u in users):
        return 0.0
    return whole


def _written_bytes(fused: Computation) -> float:
    """HBM bytes a fusion writes: its outputs, only the update of an in-place dynamic-update-slice."""
    names = fused.by_name()
    root = fused.root
    outputs = [names[o] for o in root.operands] if root.opcode == "tuple" else [root]
    total = 0.0
    for out in outputs:
        if out.opcode == "dynamic-update-slice":
            total += sum(a.bytes for a in names[out.operands[1]].result) if out.operands[1] in names else 0.0
        else:
            total += out.result_bytes
    return total


def _vector_ops(fused: Computation, module: Module) -> float:
    """32-bit operations of a fused computation: elements of each arithmetic result (reductions: of
    their input), special functions weighted by TRANSCENDENTAL_OPS."""
    names = fused.by_name()
    ops = 0.0
    for i in fused.instructions:
        if i.opcode in NO_ARITHMETIC:
            continue
        if i.opcode == "fusion":
            ops += _vector_ops(module.computations[i.called[0]], module)
        elif i.opcode in ("reduce", "reduce-window"):
            ops += sum(a.elements for a in names[i.operands[0]].result) if i.operands[0] in names else 0
        else:
            ops += i.result[0].elements * (TRANSCENDENTAL_OPS if i.opcode in TRANSCENDENTAL else 1) if i.result else 0
    return ops


def _random_ops(fused: Computation, module: Module) -> float:
    """The vector operations of a fused computation that compute random bits (by their op_name)."""
    return sum(_vector_ops(Computation(fused.name, (i,)), module) for i in fused.instructions
               if RANDOM_BITS.search(_op_name(i)))


def _fusion_kernel(instruction: Instruction, module: Module, shapes: dict[str, tuple[Array, ...]],
                   launches: int) -> Kernel:
    fused = module.computations[instruction.called[0]]
    operands = [shapes.get(o, ()) for o in instruction.operands]
    read = sum(_read_bytes(fused, index, operand) for index, operand in enumerate(operands))
    written = _written_bytes(fused)
    inner_shapes = {i.name: i.result for i in fused.instructions}
    dots = [i for i in fused.instructions if i.opcode == "dot"]
    part = part_of(_op_name(instruction) or _op_name(fused.root))
    sort = next((i for i in fused.instructions if i.opcode == "sort"), None)
    if sort is not None:  # in a train step: the deterministic scatter-add of the embedding gradient, sorted
        return _sort_kernel(sort, part if _op_name(instruction) else "embedding gradient (scatter)", launches)
    if dots:
        return Kernel(instruction.name, "matmul", part, launches, sum(dot_flops(d, inner_shapes) for d in dots),
                      0.0, read + written)
    vector_ops = _vector_ops(fused, module)
    if vector_ops and _random_ops(fused, module) > vector_ops / 2:
        part = "random bits"  # the hash of the random bits outweighs what the fusion does with them
    kind = "reduction" if "kind=kInput" in instruction.attributes else "fusion"
    if fused.root.opcode == "dynamic-update-slice" or "dynamic_slice" in instruction.called[0]:
        kind = "slice copy"
    if fused.root.opcode == "scatter" or any(i.opcode == "scatter" for i in fused.instructions):
        kind = "scatter"
    return Kernel(instruction.name, kind, part, launches, 0.0, vector_ops, read + written)


def step_kernels(module: Module) -> list[Kernel]:
    """Every kernel of the module's ENTRY computation, loop bodies expanded by their known trip counts."""
    kernels: list[Kernel] = []
    _walk(module, module.entry, 1, kernels)
    return kernels


def _trip_count(instruction: Instruction) -> int:
    found = re.search(r'"known_trip_count":\{"n":"(\d+)"', instruction.attributes)
    if not found:
        raise ValueError(f"while loop {instruction.name}: no known trip count in its backend_config")
    return int(found.group(1))


def _walk(module: Module, computation: Computation, launches: int, kernels: list[Kernel]) -> None:
    shapes = {i.name: i.result for i in computation.instructions}
    for instruction in computation.instructions:
        opcode = instruction.opcode
        if opcode in FREE:
            continue
        if opcode == "while":
            _walk(module, module.computations[instruction.calls("body")], launches * _trip_count(instruction), kernels)
        elif opcode == "conditional":
            branches = [module.computations[name] for name in instruction.called]
            costs = []
            for branch in branches:
                found: list[Kernel] = []
                _walk(module, branch, launches, found)
                costs.append(found)
            kernels += max(costs, key=lambda ks: predicted_seconds(ks, H200))
        elif opcode == "call":
            _walk(module, module.computations[instruction.called[0]], launches, kernels)
        elif opcode == "fusion":
            kernels.append(_fusion_kernel(instruction, module, shapes, launches))
        else:
            kernels.append(_other_kernel(instruction, shapes, launches))


def _other_kernel(instruction: Instruction, shapes: dict[str, tuple[Array, ...]], launches: int) -> Kernel:
    """A kernel that is not a fusion: a library call (cuBLAS, cuDNN), a sort, or one unfused op."""
    part = part_of(_op_name(instruction))
    moved = sum(sum(a.bytes for a in shapes.get(o, ())) for o in instruction.operands) + instruction.result_bytes
    target = re.search(r'custom_call_target="([^"]+)"', instruction.attributes)
    target = target.group(1) if target else ""
    if "triton" in target or "mosaic" in target:  # a Pallas kernel: nothing inside it is seen
        found = re.search(r'\bname = "([\w.\-]+)"', instruction.attributes)
        name = found.group(1) if found else ""
        part = "loss (logits, cross-entropy)" if name in KERNEL_MATMULS else part
        return Kernel(instruction.name, "custom call", part, launches, custom_call_flops(name, instruction, shapes),
                      0.0, moved)
    if "fmha" in target:
        return Kernel(instruction.name, "attention", part, launches, attention_flops(instruction, shapes), 0.0, moved)
    if "gemm" in target or "matmul" in target:
        return Kernel(instruction.name, "matmul", part, launches, gemm_call_flops(instruction, shapes), 0.0, moved)
    if instruction.opcode == "sort":
        return _sort_kernel(instruction, part, launches)
    kind = "copy" if instruction.opcode in ("copy", "transpose") else instruction.opcode
    ops = 0.0 if instruction.opcode in NO_ARITHMETIC else float(instruction.result[0].elements if instruction.result else 0)
    return Kernel(instruction.name, kind, part, launches, 0.0, ops, moved)


def _sort_kernel(sort: Instruction, part: str, launches: int) -> Kernel:
    """A sort as the bitonic passes XLA's GPU sort runs (a kernel per pass, each over every row)."""
    dimension = int(re.search(r"dimensions=\{(\d+)\}", sort.attributes).group(1))
    n = sort.result[0].dims[dimension]
    element_bytes = sum(a.bytes for a in sort.result) / sort.result[0].elements
    passes, sort_bytes = bitonic_passes(n, element_bytes)
    rows = sort.result[0].elements // n
    return Kernel(sort.name, "sort", part, launches * passes, 0.0, 0.0, sort_bytes * rows / passes)


def summary(kernels: list[Kernel], gpu: Gpu, efficiency: float, key: str) -> list[tuple[str, float, int]]:
    """(group, seconds, launches) of the kernels grouped by `key` ("part", "kind" or "bound"), largest first."""
    seconds: dict[str, float] = defaultdict(float)
    launches: dict[str, int] = defaultdict(int)
    for k in kernels:
        group = k.bound(gpu) if key == "bound" else getattr(k, key)
        seconds[group] += k.seconds(gpu, efficiency)
        launches[group] += k.launches
    return sorted(((g, s, launches[g]) for g, s in seconds.items()), key=lambda row: -row[1])

