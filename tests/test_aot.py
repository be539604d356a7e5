"""`python -m babylm_jax.aot`: the real train step lowered and compiled for CUDA or a TPU topology
from this CPU, the report's lines, and bad options as one line with exit status 2."""
import importlib.util

import pytest
from fixtures.cli import user_error

from babylm_jax import aot as aot_cli
from babylm_jax.config import cli
from babylm_jax.config.schema import RunConfig
from babylm_jax.training import aot_report

HAS_CUDA_PLUGIN = importlib.util.find_spec("jax_cuda12_plugin") is not None
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None
TINY = ["--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64", "--config.model.num_layers=1",
        "--config.model.vocab_size=512", "--config.train.batch_size=8", "--config.train.seq_len=32"]


@pytest.mark.parametrize("argv,expected", [
    (["--platform=rocm"], "--platform=rocm: not one of cuda, tpu"),
    ([], "--platform is required (one of cuda, tpu): the config names no mesh.target"),
    (["--platform=cuda", "--topology=a100"], "--topology=a100: not a GPU this command knows (choices: h100, h200)"),
    (["--platform=cuda", "--config.model.attention=cudnn"], "model.attention='cudnn' needs model.dtype='bfloat16'"),
    (["--platform=tpu"], "--topology is required for --platform=tpu"),
])
def test_bad_platform_topology_or_attention_is_one_line(capsys, argv, expected):
    line = user_error(capsys, aot_cli, ["aot", "--config=configs/base.py", *argv])
    assert expected in line


def test_largest_tensors_and_attention_are_read_from_the_lowered_text():
    text = ("%0 = stablehlo.dot_general ... -> tensor<8x2x32x32xf32>\n%1 = ... tensor<8x2x32x32xf32>\n"
            "%2 = ... tensor<8x32x64xbf16>\n%3 = ... tensor<4xi32>\n")
    assert aot_report.largest_tensors(text, top=2) == [(8 * 2 * 32 * 32 * 4, "f32[8,2,32,32]", 2), (8 * 32 * 64 * 2, "bf16[8,32,64]", 1)]


@pytest.mark.gpu
def test_the_xla_path_lowered_for_cuda_holds_float32_scores_and_says_so():
    config = RunConfig.from_config(cli.load_config("configs/base.py", [*TINY, "--config.model.attention=xla"]))
    step = aot_report.cuda_step(config, 32)
    text = step.jitted.trace(*step.args).lower(lowering_platforms=("cuda",)).as_text()
    assert "float32 [B, H, L, L] scores at B = 4" in aot_report.attention_line(step.model, text, 32)  # 2 micro-batches of 4


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA_PLUGIN, reason="jax's CUDA plugin is not installed here (pip install -e '.[cuda12]'): "
                    "the CUDA compile for an H100 is not checked")
def test_cuda_report_lowers_every_length_with_cudnn_and_compiles_for_an_h100(capsys, tmp_path):
    argv = ["aot", "--config=configs/base_hybrid.py", "--platform=cuda", "--config.model.dtype=bfloat16", *TINY,
            "--config.train.batch_size=16",  # the hybrid's 1 causal row in 16 needs 16 rows a pass
            "--config.train.seq_len_curriculum=((0.0, 16), (0.5, 32))", f"--dump={tmp_path}"]
    assert aot_cli.main(argv)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("aot: cuda, one NVIDIA H100 80GB HBM3")
    for length in (16, 32):
        lowered = next(line for line in out if line.startswith(f"rows of {length}: lowered"))
        assert "attention cudnn" in lowered and "no float32 [B, H, L, L] scores" in lowered
        assert (tmp_path / f"train_step_{length}.cuda.stablehlo.mlir").read_text().count("__cudnn$fmha") >= 2
        assert any(line.startswith(f"rows of {length}: compiled") and "temporaries" in line for line in out)
    assert out[-1].startswith("aot: fits=yes peak_gb=") and out[-1].endswith("hbm_gb=74.51")


@pytest.mark.slow
@pytest.mark.tpu
@pytest.mark.skipif(not HAS_LIBTPU, reason="libtpu is not installed here (pip install -e '.[tpu]'): the TPU "
                    "topology compile is not checked")
def test_tpu_report_compiles_for_a_topology_and_says_whether_it_fits(capsys):
    assert aot_cli.main(["aot", "--config=configs/base.py", "--platform=tpu", "--topology=v5e:2x2", *TINY])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("aot: tpu v5e:2x2: 4 x TPU v5 lite (16.00 GiB HBM each)")
    assert "per chip" in out[1] and "collectives: all-reduce" in out[1] and out[-1].startswith("aot: fits=yes")
    too_big = ["--config.model.vocab_size=2000000", "--config.model.d_model=1024"]  # 24 GB of f32 state and moments
    assert not aot_cli.main(["aot", "--config=configs/base.py", "--platform=tpu", "--topology=v5e:2x2", *TINY, *too_big])
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("over by ") and out[-1].startswith("aot: fits=no")
    assert "--topology=v9x:1x1" in user_error(capsys, aot_cli, ["aot", "--config=configs/base.py", "--platform=tpu",
                                                                 "--topology=v9x:1x1"])


@pytest.mark.slow
@pytest.mark.tpu
@pytest.mark.skipif(not HAS_LIBTPU, reason="libtpu is not installed here (pip install -e '.[tpu]'): the TPU "
                    "topology compile is not checked")
def test_tpu_report_compiles_a_hybrid_step_through_splash_attention(capsys):
    """Rows of 128 take the splash kernel (mixed causal and bidirectional rows, split over the mesh with
    shard_map): its mask tables are built for a topology's compile-only devices, where nothing can run."""
    tiny = [arg for arg in TINY if "seq_len" not in arg and "batch_size" not in arg] + [
        "--config.train.seq_len=128", "--config.train.batch_size=16", "--config.train.hybrid_causal_share=0.25"]
    assert aot_cli.main(["aot", "--config=configs/base_hybrid.py", "--platform=tpu", "--topology=v5e:2x2", *tiny])
    out = capsys.readouterr().out.splitlines()
    compiled_line = next(line for line in out if line.startswith("rows of 128: compiled"))
    assert "attention splash" in compiled_line and out[-1].startswith("aot: fits=yes")


@pytest.mark.gpu
def test_the_accelerator_step_trains_the_auxiliary_heads_the_recipe_names():
    """The heads' logits (a pass's 4 x 32 positions into 1,379 syllables) are in the step as in train's, not
    only their parameters."""
    def lowered(*flags):
        config = RunConfig.from_config(cli.load_config("configs/base.py", [*TINY, "--config.model.attention=xla", *flags]))
        step = aot_report.cuda_step(config, 32)
        return step.jitted.trace(*step.args).lower(lowering_platforms=("cuda",)).as_text()

    assert "tensor<128x1379xf32>" in lowered("--config.train.aux_heads.syllable=0.3")
    assert "x1379xf32>" not in lowered()
