"""On a CPU host with libtpu installed (the test extra brings it), JAX starts without libtpu's lines."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import tiny_config

from babylm_jax.core.host import platforms

REPO = pathlib.Path(__file__).parents[1]
LIBTPU_LINES = ("libtpu", "TPU_", "E0000", "InitGoogle")  # what libtpu prints when it starts on a CPU host


def test_jax_platforms_is_cpu_without_an_accelerator_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(platforms, "has_accelerator_device", lambda: False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # libtpu installed
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    platforms.skip_absent_tpu()
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("JAX_PLATFORMS", "")  # the user's: JAX chooses
    platforms.skip_absent_tpu()
    assert os.environ["JAX_PLATFORMS"] == ""
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.setattr(platforms, "has_accelerator_device", lambda: True)  # a TPU or GPU host
    platforms.skip_absent_tpu()
    assert "JAX_PLATFORMS" not in os.environ


@pytest.mark.slow
@pytest.mark.tpu
def test_a_tiny_train_on_a_cpu_host_prints_no_libtpu_line(tiny_corpus_dir, tmp_path):
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip("libtpu is not installed (the test or tpu extra)")
    if platforms.has_accelerator_device():
        pytest.skip("this host has an accelerator device")
    config_file = tmp_path / "config.py"
    config_file.write_text("import ml_collections\n\n\ndef get_config():\n    return ml_collections.ConfigDict(%r)\n"
                           % json.loads(tiny_config(tiny_corpus_dir).to_json()))
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # as a user's shell: JAX_PLATFORMS unset
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # another process's libtpu lock would stop libtpu before it speaks
    result = subprocess.run([sys.executable, "-m", "babylm_jax.train", f"--config={config_file}",
                             f"--workdir={tmp_path / 'run'}", "--config.train.num_steps=2"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert [line for line in lines if any(mark in line for mark in LIBTPU_LINES)] == []
