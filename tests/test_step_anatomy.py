"""The GPU step anatomy: a compiled CUDA program read into kernels, each costed by a roofline.

tests/fixtures/cuda_scan_sort.hlo.txt is XLA's GPU compiler's output (for an H200, compile-only) of
a three-layer `lax.scan` of bf16 matmuls stacking its outputs, a sum and a sort of 65,536 floats.
"""
import math
import pathlib

import pytest

from babylm_jax.tools import step_anatomy
from babylm_jax.tools.hlo_program import parse_instruction, parse_module

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "cuda_scan_sort.hlo.txt"


@pytest.fixture(scope="module")
def kernels():
    return {k.name: k for k in step_anatomy.step_kernels(parse_module(FIXTURE.read_text()))}


def test_an_instruction_line_parses_with_tuple_types_comments_and_called_computations():
    line = ('  %while.6 = (s32[], f32[1024,256]{1,0}, /*index=2*/bf16[3,4]{1,0}) while(%tuple.2), '
            'condition=%region_1.5, body=%region_0.4, backend_config={"known_trip_count":{"n":"3"}}')
    instruction = parse_instruction(line)
    assert (instruction.name, instruction.opcode, instruction.operands) == ("while.6", "while", ("tuple.2",))
    assert [a.dims for a in instruction.result] == [(), (1024, 256), (3, 4)]
    assert instruction.result_bytes == 4 + 1024 * 256 * 4 + 12 * 2
    assert instruction.calls("body") == "region_0.4" and instruction.called == ("region_1.5", "region_0.4")


def test_loop_bodies_count_once_per_trip_and_matmul_flops_are_exact(kernels):
    gemm = kernels["gemm_fusion_dot_general.0"]
    assert gemm.kind == "matmul" and gemm.launches == 3
    assert gemm.matmul_flops == 2 * 1024 * 256 * 256


def test_in_place_updates_and_slices_move_only_the_slice(kernels):
    update = kernels["loop_dynamic_update_slice_fusion"]  # writes one [1024, 256] f32 layer into [3, 1024, 256]
    assert update.bytes == pytest.approx(2 * 1024 * 256 * 4, abs=16)
    sliced = kernels["loop_convert_fusion"]  # one [256, 256] f32 layer of [3, 256, 256] read, written as bf16
    assert sliced.bytes == pytest.approx(256 * 256 * (4 + 2), abs=16)


def xla_sort_kernels(n: int) -> int:
    """The kernels of XLA's GPU bitonic sort by its own loop: one per comparison mask at or above
    the 2,048-element tile, one per run of smaller masks."""
    stages = math.ceil(math.log2(n))
    masks = [m for s in range(stages) for m in [(1 << (s + 1)) - 1] + [1 << j for j in range(s - 1, -1, -1)]]
    runs = sum(1 for i, m in enumerate(masks) if m < 2048 and (i == 0 or masks[i - 1] >= 2048))
    return runs + sum(1 for m in masks if m >= 2048)


@pytest.mark.parametrize("n", [1000, 2048, 4096, 65536, 2**24])
def test_a_sort_costs_the_bitonic_passes_of_xla(n):
    passes, moved = step_anatomy.bitonic_passes(n, 12)
    assert passes == xla_sort_kernels(n)
    assert moved == passes * 2 * n * 12
    assert step_anatomy.bitonic_passes(2**24, 12)[0] == 105  # the deterministic embedding gradient of causal_14m


def test_the_sort_in_the_program_is_costed_as_its_passes(kernels):
    sort = next(k for k in kernels.values() if k.kind == "sort")
    assert sort.launches == xla_sort_kernels(65536) == 21
    assert sort.bytes == 2 * 65536 * (4 + 4)  # float keys and int32 positions, read and written a pass


def test_a_kernel_takes_its_slowest_bound_and_the_fit_recovers_an_efficiency():
    gpu = step_anatomy.Gpu("test", matmul_flops=100.0, vector_ops=10.0, bandwidth=50.0, launch_s=0.5)
    matmul = step_anatomy.Kernel("m", "matmul", "forward", 2, matmul_flops=400.0, bytes=100.0)
    assert matmul.seconds(gpu) == 2 * (4.0 + 0.5) and matmul.bound(gpu) == "compute"
    copy = step_anatomy.Kernel("c", "copy", "forward", 1, vector_ops=10.0, bytes=500.0)
    assert copy.seconds(gpu, 0.5) == 10.0 / 0.5 + 0.5 and copy.bound(gpu) == "memory"
    programs = [([matmul], matmul.seconds(gpu, 0.4)), ([copy], copy.seconds(gpu, 0.4))]
    assert step_anatomy.fitted_efficiency(programs, gpu) == pytest.approx(0.4, rel=1e-6)


@pytest.mark.parametrize("op_name, part", [
    ("jit(step_fn)/jvp(Transformer.encode)/while/body/closed_call/layers/mlp/dot_general", "forward"),
    ("jit(step_fn)/transpose(jvp(Transformer.encode))/while/body/closed_call/checkpoint/rematted_computation/x",
     "remat recompute"),
    ("jit(step_fn)/transpose(jvp(Transformer.encode))/while/body/closed_call/checkpoint/layers/mul", "backward"),
    ("jit(step_fn)/jvp()/while/body/closed_call/dot_general", "loss (logits, cross-entropy)"),
    ("jit(step_fn)/jvp(jit(_uniform))/jit(_threefry_split)/xor", "random bits"),
    ("jit(step_fn)/jit(norm)/sqrt", "optimizer, EMA, norms"),
])
def test_kernels_are_attributed_to_the_part_of_the_step_they_serve(op_name, part):
    assert step_anatomy.part_of(op_name) == part


@pytest.mark.gpu
def test_a_compiled_step_s_matmul_flops_match_the_model_flops(tmp_path):
    """The real causal train step compiled for an H200 (jax's CUDA plugin, no GPU): the FLOPs of its
    matmul kernels are the model FLOPs of training/metrics.py within 3%, counting the whole
    attention square ("xla" attention computes the masked half too)."""
    from conftest import tiny_config

    from babylm_jax.config.schema import RunConfig
    from babylm_jax.training import aot_report, devices, metrics

    try:
        device = devices.cuda_device("h200")
    except ImportError as error:
        pytest.skip(str(error))
    config = tiny_config(tmp_path)
    config.model.update(d_model=64, d_ff=256, num_layers=2, num_heads=2, vocab_size=512, max_len=128, dtype="float32",
                        attention="xla", scan_layers=True)
    config.train.update(batch_size=8, seq_len=128, grad_accum_steps=1)
    config = RunConfig.from_config(config)
    step = aot_report.cuda_step(config, 128, device)
    program = parse_module(step.jitted.lower(*step.args).compile().as_text())
    kernels = step_anatomy.step_kernels(program)
    counted = sum(k.matmul_flops * k.launches for k in kernels)
    whole_square = metrics.train_flops_per_token(step.model.config, 128, causal_share=0.0) * 8 * 128
    assert counted == pytest.approx(whole_square, rel=0.03)
    assert counted > aot_report.step_tflops(config, step.model, 128) * 1e12 * 1.05  # the causal half is counted


PALLAS_MODULE = """HloModule m, is_scheduled=true

ENTRY %main (x: bf16[128,256], e: bf16[1024,256], t: s32[128]) -> (f32[128], f32[128]) {
  %x.1 = bf16[128,256]{1,0} parameter(0)
  %e.1 = bf16[1024,256]{1,0} parameter(1)
  %t.1 = s32[128]{0} parameter(2)
  ROOT %pallas_call.3 = (f32[128]{0}, f32[128]{0}) custom-call(%x.1, %e.1, %t.1), custom_call_target="__gpu$xla.gpu.triton", metadata={op_name="jit(<lambda>)/fused_ce_lse/pallas_call"}, backend_config={debug = false, grid_x = 1 : i32, ir = "ML\\EFR\\0D", name = "NAME", num_stages = 2 : i32}
}
"""


@pytest.mark.parametrize("name, matmuls", [("fused_ce_lse", 1), ("fused_add_norm", 0)])
def test_a_pallas_call_costs_its_known_matmuls_or_at_least_its_bytes(name, matmuls):
    [kernel] = step_anatomy.step_kernels(parse_module(PALLAS_MODULE.replace("NAME", name)))
    assert kernel.kind == "custom call"
    assert kernel.matmul_flops == matmuls * 2 * 128 * 1024 * 256
    assert kernel.bytes == (128 * 256 + 1024 * 256) * 2 + 128 * 4 + 2 * 128 * 4  # operands and results, once
    gpu = step_anatomy.H200
    assert kernel.seconds(gpu) >= kernel.bytes / gpu.bandwidth
