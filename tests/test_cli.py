"""One error path for train, prepare, evaluate and export (issue 14's CLI cases): one line naming
the file, key or option and the fix, exit status 2, no traceback, and no work done before it."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from babylm_jax import evaluate, export, prepare, train
from fixtures.cli import user_error
from fixtures.run import make_run

REPO = pathlib.Path(__file__).parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "minimal_pairs"


def test_unknown_config_key_is_named_with_the_closest_key(capsys, tmp_path):
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path}",
                                      "--config.train.batchsize=8"])
    assert "--config.train.batchsize" in line and "configs/base.py" in line and "train.batch_size" in line
    line = user_error(capsys, prepare, ["prepare", "--config=configs/base.py", f"--workdir={tmp_path}",
                                        "--config.modle.d_model=8"])
    assert "no config key modle.d_model" in line
    assert not any(tmp_path.iterdir())


def test_missing_or_broken_config_file_and_bad_options(capsys, tmp_path):
    line = user_error(capsys, prepare, ["prepare", "--config=configs/nope.py", f"--workdir={tmp_path}"])
    assert "--config=configs/nope.py: config file not found" in line
    broken = tmp_path / "broken.py"
    broken.write_text("def get_config(:\n")
    assert f"{broken}:1: invalid syntax" in user_error(capsys, train, ["train", f"--config={broken}",
                                                                        f"--workdir={tmp_path}"])
    assert "--workdir is required" in user_error(capsys, train, ["train", "--config=configs/base.py"])
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path}",
                                      "--config.train.num_steps=many"])
    assert "--config.train.num_steps=many" in line
    assert "unexpected argument(s) extra" in user_error(capsys, train, ["train", "--config=configs/base.py",
                                                                        f"--workdir={tmp_path}", "extra"])


@pytest.mark.parametrize("overrides,expected", [
    (["--config.mesh.num_devices=8", "--config.train.batch_size=12"],
     "train.batch_size=12 must be a multiple of the 8 data-parallel devices"),
    (["--config.mesh.num_devices=16"], "mesh.num_devices=16: 8 device(s) are present"),
    (["--config.train.batch_size=0"], "train.batch_size=0: must be >= 1"),
])
def test_impossible_batch_or_mesh_is_refused_before_any_data_work(capsys, tmp_path, overrides, expected):
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}",
                                      *overrides])
    assert expected in line
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def _damage(run: pathlib.Path, relative: str, text: str) -> pathlib.Path:
    path = run / relative
    path.write_text(text)
    return path


@pytest.mark.parametrize("relative,text,expected", [
    ("config.json", '{"model": {"family": ', "config.json:1: not valid JSON"),
    ("config.json", "[1, 2]", "config.json: expected a JSON object"),
    ("tokenizer/tokenizer.json", "{", "tokenizer.json:1: not valid JSON"),
    ("tokenizer/tokenizer.json", '{"kind": "char"}', "tokenizer.json: missing key(s) ['model_file', 'byte_fallback']"),
    ("tokenizer/chars.json", "\x00garbage", "chars.json:1: not valid JSON"),
    ("checkpoints/3/meta/metadata", "{not json", "checkpoint "),
])
def test_damaged_workdir_files_are_named(capsys, tmp_path, relative, text, expected):
    run = tmp_path / "run"
    make_run(run)
    path = _damage(run, relative, text)
    line = user_error(capsys, export, ["export", f"--workdir={run}", f"--output={tmp_path / 'hf'}"])
    assert expected in line
    assert str(path) in line or str(run / "checkpoints" / "3") in line
    assert not (tmp_path / "hf").exists()
    line = user_error(capsys, evaluate, ["evaluate", f"--workdir={run}", f"--data_dir={FIXTURES}",
                                         "--tasks=zhoblimp", f"--output={tmp_path / 'eval' / 'results.json'}"])
    assert expected in line
    assert not (tmp_path / "eval").exists()


def test_the_real_entry_point_prints_one_line_and_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "babylm_jax.train", "--config", "configs/base.py", "--workdir", str(tmp_path),
         "--config.train.num_stepz=3"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "train: error: --config.train.num_stepz: configs/base.py has no config key train.num_stepz; "
        "did you mean train.num_steps?"]


def test_evaluate_writes_the_finished_tasks_when_a_later_one_fails(capsys, tmp_path):
    run, data = tmp_path / "run", tmp_path / "data"
    make_run(run)
    shutil.copytree(FIXTURES, data)
    broken = sorted((data / "xcomps_zh").glob("*.jsonl"))[0]
    broken.write_text('{"acceptable_sent": "好"}\n', encoding="utf-8")
    output = tmp_path / "eval" / "results.json"
    line = user_error(capsys, evaluate, ["evaluate", f"--workdir={run}", f"--data_dir={data}",
                                         "--tasks=xcomps_zh,zhoblimp", f"--output={output}",
                                         "--config.scoring.batch_size=8"])
    assert f"{broken}:1: missing field 'unacceptable_sent'" in line
    assert set(json.loads(output.read_text())) == {"zhoblimp"}
    details = json.loads(output.with_name("results_details.json").read_text())
    assert list(details["failed"]) == ["xcomps_zh"] and "missing field" in details["failed"]["xcomps_zh"]
    assert "## Failed" in output.with_name("report.md").read_text()


def test_prepare_checks_the_evaluation_data_before_the_corpus_pass(capsys, tmp_path):
    argv = ["prepare", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}"]
    line = user_error(capsys, prepare, [*argv, f"--data_dir={tmp_path / 'nope'}"])
    assert f"--data_dir={tmp_path / 'nope'} is not a directory" in line
    line = user_error(capsys, prepare, [*argv, f"--config.data.leakage.data_dir={tmp_path / 'nope'}"])
    assert f"config key data.leakage.data_dir={tmp_path / 'nope'} is not a directory" in line
    broken = tmp_path / "eval_data" / "zhoblimp"
    broken.mkdir(parents=True)
    (broken / "a.jsonl").write_text("{not json\n", encoding="utf-8")
    assert "a.jsonl:1" in user_error(capsys, prepare, [*argv, f"--data_dir={tmp_path / 'eval_data'}"])
    assert not (tmp_path / "run" / "budget.json").exists()


def test_the_tools_and_gather_take_options_in_the_one_grammar(capsys, tmp_path):
    from babylm_jax.tools import fmri_synth

    assert user_error(capsys, fmri_synth, ["fmri_synth"]) == "fmri_synth: error: --out is required (see --help)"
    assert "--snr" in user_error(capsys, fmri_synth, ["fmri_synth", f"--out={tmp_path}", "--snr=loud"])
    assert user_error(capsys, evaluate, ["evaluate", "--gather", "--output", str(tmp_path)]) == (
        "evaluate: error: --gather needs at least one RUN: a results.json, or a folder holding one")
    assert "Unknown command line flag 'outptu'. Did you mean: output" in user_error(capsys, evaluate, ["evaluate", "--gather", str(tmp_path), "--outptu=x"])
    assert not any(tmp_path.iterdir())
