"""The package installed from a wheel, outside the source tree, runs prepare, train, evaluate and export.

The wheel is built from a copy of the package's files, installed with --no-deps into a fresh
venv that sees this test environment's packages (a .pth naming its site-packages folders), and
run from a folder that holds no source. It builds with this environment's setuptools (>= 70.1,
which builds wheels itself; the test extra brings it); it takes about a minute (four processes,
one tiny compile each).
"""
from __future__ import annotations

import json
import re
import os
import pathlib
import shutil
import site
import subprocess
import sys
import venv

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "minimal_pairs"
TINY = ["--config.data.eval_share=0.05", "--config.data.num_workers=1", "--config.data.shard_chars=2000",
        "--config.data.tokenizer.kind=char", "--config.data.tokenizer.byte_fallback=False",
        "--config.model.vocab_size=64", "--config.model.d_model=32", "--config.model.num_layers=2",
        "--config.model.num_heads=2", "--config.model.d_ff=64", "--config.model.max_len=64",
        "--config.train.num_steps=4", "--config.train.batch_size=8", "--config.train.seq_len=32",
        "--config.train.warmup_steps=1", "--config.train.eval_every_steps=4", "--config.train.eval_batches=1",
        "--config.train.grad_accum_steps=1", "--config.checkpoint.every_steps=4",
        "--config.checkpoint.word_milestones=False", "--config.mesh.num_devices=1"]


def build_wheel(tmp_path: pathlib.Path) -> pathlib.Path:
    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside setup.py
    shutil.copytree(REPO / "babylm_jax", source / "babylm_jax", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    # pyproject.toml's build requirements checked against this environment (the test extra's)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--check-build-dependencies",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True, timeout=300)
    return next((tmp_path / "dist").glob("babylm_jax-*.whl"))


def install(wheel: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
    """A fresh venv holding the wheel and seeing this environment's packages; returns its python."""
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, timeout=300)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Plain folder lines: the folders join sys.path after the venv's own, their .pth files (the
    # editable install of the checkout among them) are not run.
    (pathlib.Path(purelib) / "test_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def run(python: pathlib.Path, cwd: pathlib.Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BABYLM_DATA_DIR", "XLA_FLAGS")}
    result = subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args[:2]}: {result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_installed_wheel_prepares_trains_evaluates_and_exports(tmp_path, tiny_corpus_dir):
    python = install(build_wheel(tmp_path), tmp_path / "venv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(python, elsewhere, "-c", "import babylm_jax; print(babylm_jax.__file__)")
    assert where.startswith(str(tmp_path / "venv")), where
    config = shutil.copy(REPO / "configs" / "base.py", elsewhere / "recipe.py")
    options = [f"--config={config}", "--workdir=run", f"--config.data.corpus={tiny_corpus_dir}", *TINY]
    prepared = run(python, elsewhere, "-m", "babylm_jax.prepare", *options, f"--data_dir={FIXTURES}")
    assert re.search(r"prepare took [\d.]+ s: evaluation items .* count words .* tokenise .* leakage check [\d.]+ s", prepared)
    assert json.loads((elsewhere / "run" / "budget.json").read_text())["words"] > 0
    run(python, elsewhere, "-m", "babylm_jax.train", *options)
    assert (elsewhere / "run" / "checkpoints" / "4").is_dir()
    run(python, elsewhere, "-m", "babylm_jax.evaluate", "--workdir=run", f"--data_dir={FIXTURES}",
        "--tasks=zhoblimp", "--limit=8", "--config.scoring.batch_size=8")  # evaluate's defaults from the wheel
    results = json.loads((elsewhere / "run" / "eval" / "results.json").read_text())
    assert 0.0 <= results["zhoblimp"]["accuracy"] <= 1.0
    run(python, elsewhere, "-m", "babylm_jax.export", "--workdir=run", "--output=hf")
    assert (elsewhere / "hf" / "model.safetensors").is_file() and (elsewhere / "hf" / "tokenizer.json").is_file()
