"""On a CPU host with libtpu installed (the test extra brings it), JAX starts without libtpu's lines."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import tiny_config

from babylm_jax.config import cli
from babylm_jax.core import platforms

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


DETERMINISTIC_SCRIPT = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax
from babylm_jax.config import cli
from babylm_jax.core import platforms
assert not platforms.backend_started()
platforms.use_deterministic_ops()
platforms.use_deterministic_ops()  # once is enough: the flag is not repeated
print(os.environ["XLA_FLAGS"])
print(len(jax.devices()))  # the flags already there still hold: 2 CPU devices
assert platforms.backend_started()
platforms.use_deterministic_ops()  # started with the flag: nothing to do
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
platforms.use_deterministic_ops()  # a CPU backend: the GPU flag would change nothing, so nothing to refuse
jax.default_backend = lambda: "gpu"
try:
    platforms.use_deterministic_ops()
except platforms.BackendStarted as error:
    print(error)
"""


def test_deterministic_ops_are_set_before_the_backend_starts_or_refused():
    result = subprocess.run([sys.executable, "-c", DETERMINISTIC_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result.returncode == 0, result.stderr
    flags, devices, refusal = result.stdout.splitlines()
    assert flags == "--xla_force_host_platform_device_count=2 --xla_gpu_deterministic_ops=true" and devices == "2"
    assert refusal.startswith("train.deterministic: JAX's backend has already started in this process")


TRAIN_SPY = """
import os, runpy, sys
import jax._src.xla_bridge as xla_bridge
started_with = []
start = xla_bridge._init_backend
def spy(platform):
    started_with.append(os.environ.get("XLA_FLAGS", ""))
    return start(platform)
xla_bridge._init_backend = spy
sys.argv = ["train", *sys.argv[1:]]
try:
    runpy.run_module("babylm_jax.train", run_name="__main__")
finally:
    print("XLA_FLAGS when the backend started:", started_with[0])
"""


@pytest.mark.slow
def test_train_deterministic_sets_the_flag_before_the_backend_starts(tiny_corpus_dir, tmp_path):
    config_file = tmp_path / "config.py"
    config_file.write_text("import ml_collections\n\n\ndef get_config():\n    return ml_collections.ConfigDict(%r)\n"
                           % json.loads(tiny_config(tiny_corpus_dir).to_json()))
    result = subprocess.run([sys.executable, "-c", TRAIN_SPY, f"--config={config_file}", f"--workdir={tmp_path / 'run'}",
                             "--config.train.num_steps=1", "--config.train.deterministic=true"],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == ("XLA_FLAGS when the backend started: --xla_force_host_platform_device_count=1 "
                         "--xla_gpu_deterministic_ops=true")
    assert "train: bit-exact: CPU runs are (train.deterministic changes nothing here)" in lines[:3]


def test_the_train_line_on_determinism_says_where_and_the_cost(monkeypatch):
    import jax

    from babylm_jax.config.schema import RunConfig
    from babylm_jax.training.devices import describe_determinism

    config = tiny_config(pathlib.Path("corpus"))
    for platform, deterministic, expected in [
        ("cpu", False, "bit-exact: CPU runs are"),
        ("gpu", True, "bit-exact: GPU with deterministic ops (train.deterministic; measured -22% tokens/s"),
        ("gpu", False, "not bit-exact: GPU without deterministic ops, so runs and resumes may differ slightly "
                       "(two fresh runs of causal_14m on an H200 differed by up to 0.0127 in loss by step 100); "
                       "--config.train.deterministic=true makes them bit-exact"),
    ]:
        config.train.deterministic = deterministic
        monkeypatch.setattr(jax, "default_backend", lambda: platform)
        assert describe_determinism(RunConfig.from_config(config)).startswith(expected)


@pytest.mark.skipif(importlib.util.find_spec("jax_cuda12_plugin") is not None, reason="the CUDA plugin is installed")
def test_jax_platforms_naming_a_backend_with_no_plugin_here_is_one_line():
    """JAX_PLATFORMS=cuda without the CUDA plugin: JAX's xla_bridge fails an assert; it was its traceback, exit 1."""
    script = ("import jax\n"
              "from babylm_jax.config import cli\n"
              "cli.Command('demo', 'a command on the devices').run(lambda argv: print(jax.devices()))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "JAX_PLATFORMS": "cuda"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "demo: error: environment variable JAX_PLATFORMS='cuda': JAX found none of these backends here (no plugin "
        "installed for them, or no device); unset it (JAX then uses the backends this host has) or name one it has, "
        "e.g. cpu")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flags, reason", [
    ("--xla_no_such_flag=1", "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1"),
    ("--xla_force_host_platform_device_count=two", "Couldn't interpret value two for flag "
                                                   "xla_force_host_platform_device_count"),
    (" ", 'Could not open file " " to read flags'),
])
def test_an_xla_flags_that_xla_refuses_is_one_line_naming_the_variable(flags, reason, monkeypatch, capsys):
    """XLA ends a process in its own fatal line, exit 1, on an XLA_FLAGS it cannot read; the command says so first."""
    monkeypatch.setattr(platforms, "backend_started", lambda: False)  # as at a command's start
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setattr(cli, "stop_on_signals", lambda on_stop: None)  # this test process keeps its handlers
    monkeypatch.setattr(cli.signal, "signal", lambda signum, handler: None)
    with pytest.raises(SystemExit) as exited:
        cli.Command("demo", "").run(lambda argv: pytest.fail("the command ran"))
    assert exited.value.code == cli.EXIT_USER_ERROR
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"demo: error: environment variable XLA_FLAGS={flags!r}: XLA refuses it ({reason}")
    assert line.endswith("remove or correct that flag (XLA's own flags start with --xla_), or unset XLA_FLAGS")


def test_xla_flags_xla_reads_are_checked_once_for_a_process_and_its_children(monkeypatch):
    monkeypatch.setattr(platforms, "backend_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    monkeypatch.delenv("BABYLM_XLA_FLAGS_CHECKED", raising=False)
    platforms.check_xla_flags()
    assert os.environ["BABYLM_XLA_FLAGS_CHECKED"] == "--xla_force_host_platform_device_count=2"
    monkeypatch.setattr(platforms.subprocess, "Popen", lambda *a, **k: pytest.fail("checked again"))
    platforms.check_xla_flags()
