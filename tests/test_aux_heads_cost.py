"""experiments/benchmarks/aux_heads_cost.py: the two steps differ only in the heads; a tiny run prints its lines."""
import os
import subprocess
import sys

import pytest
from fixtures.scripts import ROOT, load_script

TINY = ["--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64", "--config.model.num_layers=1",
        "--config.train.batch_size=8", "--config.train.seq_len=16", "--config.train.grad_accum_steps=1"]


@pytest.fixture(scope="module")
def bench():
    return load_script("experiments/benchmarks/aux_heads_cost.py")


def test_a_configs_own_head_weights_are_kept_and_the_others_filled(bench):
    own = {"syllable": 0.0, "tone": 0.5, "initial": 0.0, "final": 0.0, "radical": 0.0}
    with_heads, none = bench.head_flags(own)
    assert "--config.train.aux_heads.tone=0.5" in with_heads and "--config.train.aux_heads.syllable=0.3" in with_heads
    assert none == [f"--config.train.aux_heads.{head}=0.0" for head in own]


def test_a_tiny_run_prints_the_ratio(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "experiments/benchmarks/aux_heads_cost.py"), "--repeats=1",
                             "--steps=1", *TINY], capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env={**os.environ, "BABYLM_PEAK_CACHE": str(tmp_path / "peak.json")})
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if line.startswith("heads_"))
    assert float(lines["heads_over_none_step_time[configs/base.py]"]) > 0
    assert lines["heads_flops_share[configs/base.py]"].endswith("(syllable, tone, initial, final, radical)")
