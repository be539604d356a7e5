"""One error path for train, prepare, evaluate and export (issue 14's CLI cases): one line naming
the file, key or option and the fix, exit status 2, no traceback, and no work done before it."""
import json
import re
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import pytest

from babylm_jax import evaluate, export, prepare, train
from babylm_jax.config import cli
from babylm_jax.config.schema import RunConfig
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


@pytest.mark.parametrize("text,line,expected", [
    ("import ml_collections\nx = 1\nraise RuntimeError('no corpus here')\n", 3, "RuntimeError: no corpus here"),
    ("def helper():\n    return {}['size']\n\n\ndef get_config():\n    return helper()\n", 2, "KeyError: 'size'"),
    ("import nosuchmodule_here\n", 1, "ModuleNotFoundError: No module named 'nosuchmodule_here'"),
])
def test_a_config_file_that_raises_is_named_with_its_line(capsys, tmp_path, text, line, expected):
    config = tmp_path / "my config.py"
    config.write_text(text)
    said = user_error(capsys, train, ["train", f"--config={config}", f"--workdir={tmp_path / 'run'}"])
    assert said == f"train: error: {config}:{line}: {expected} (in the --config file)"
    outer = tmp_path / "outer.py"  # a config file that loads the broken one: the broken one is named
    outer.write_text("from babylm_jax.config.files import load_config_file\n\n\ndef get_config():\n"
                     f"    return load_config_file({str(config)!r})\n")
    said = user_error(capsys, train, ["train", f"--config={outer}", f"--workdir={tmp_path / 'run'}"])
    assert said == f"train: error: {config}:{line}: {expected} (in the --config file)"


@pytest.mark.parametrize("returned, said", [("None", "None, not an ml_collections.ConfigDict (does it end with "
                                                   "`return config`?)"),
                                           ("[1]", "list, not an ml_collections.ConfigDict")])
@pytest.mark.parametrize("overrides", [[], ["--config.train.num_steps=2"]])
def test_a_config_file_whose_get_config_returns_no_config_dict_is_named(capsys, tmp_path, returned, said, overrides):
    config = tmp_path / "returns.py"
    config.write_text(f"def get_config():\n    config = 1\n    return {returned}\n")
    line = user_error(capsys, train, ["train", f"--config={config}", f"--workdir={tmp_path / 'run'}", *overrides])
    assert line.startswith(f"train: error: {config}: get_config() returned {said}")
    assert line.endswith("(in the --config file)")


def test_a_config_file_whose_path_holds_a_colon_is_named(capsys, tmp_path):
    """config_flags reads `file.py:arg`: a folder named a:b made the file "not found"."""
    config = tmp_path / "a:b" / "config.py"
    config.parent.mkdir()
    config.write_text("import configs.base\n\n\ndef get_config():\n    return configs.base.get_config()\n")
    line = user_error(capsys, train, ["train", f"--config={config}", f"--workdir={tmp_path / 'run'}"])
    assert line == (f"train: error: --config={config}: a ':' in a config file's path starts get_config's argument "
                    "(file.py:arg); give a path without ':' (a link to the file)")


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
    (["--config.model.attention=flash"], "model.attention: 'flash' is not one of auto, xla, cudnn, splash, reference"),
    (["--config.model.attention=cudnn", "--config.model.dtype=bfloat16"],
     "model.attention='cudnn' needs a CUDA GPU, and this run's platform is cpu"),
    (["--config.model.residual_dtype=float16"], "model.residual_dtype: 'float16'"),
])
def test_impossible_batch_or_mesh_is_refused_before_any_data_work(capsys, tmp_path, overrides, expected):
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}",
                                      *overrides])
    assert expected in line
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_a_gpu_recipe_on_a_cpu_backend_is_refused_unless_asked(capsys, tmp_path):
    line = user_error(capsys, train, ["train", "--config=configs/causal_14m.py", f"--workdir={tmp_path / 'run'}"])
    assert "made for cuda (config key mesh.target) and JAX's backend is cpu" in line and "--allow_cpu" in line
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):  # with --allow_cpu it goes on, to the first thing it lacks: the corpus
        cli.report_errors("train", train.main, ["train", "--config=configs/causal_14m.py", "--allow_cpu",
                                                f"--workdir={tmp_path / 'run'}", f"--config.data.corpus={tmp_path}/x"])
    captured = capsys.readouterr()
    assert captured.out.splitlines()[:2] == [
        f"train: JAX {jax.__version__}, backend cpu: 8 x cpu (1 process(es)); attention reference, loss kernel pallas "
        "(Pallas in interpret mode on the CPU: slow), norm kernel pallas (Pallas in interpret mode on the CPU: slow), "
        "model.dtype bfloat16",
        "train: notice: a cuda recipe on the CPU, as --allow_cpu asks: expect it to be slow"]
    assert "Corpus path does not exist" in captured.err


def test_bf16_on_a_cpu_backend_is_a_notice_and_a_plain_config_says_nothing():
    from babylm_jax.training import devices

    assert devices.check_target(RunConfig.from_config(cli.load_config("configs/base.py")), allow_cpu=False) is None
    notice = devices.check_target(RunConfig.from_config(cli.load_config("configs/base.py",
                                                                        ["--config.model.dtype=bfloat16"])), False)
    assert notice.startswith("notice: model.dtype=bfloat16 on a CPU backend")


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


def test_config_json_missing_or_disagreeing_with_the_checkpoints_copy(tmp_path, caplog):
    from babylm_jax.training.run_config import load_run_config

    run = tmp_path / "run"
    make_run(run)
    saved = json.loads((run / "config.json").read_text())
    meta = run / "checkpoints" / "3" / "meta" / "metadata"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "config": saved}))  # as the training loop saves it
    expected = load_run_config(str(run))
    edited = {**saved, "model": {**saved["model"], "d_model": 32}}  # by hand, or another run's
    (run / "config.json").write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=rf"config.json: model.d_model=32, but the checkpoints were trained with "
                                         rf"model.d_model=16 \({re.escape(str(meta))}\); restore config.json"):
        load_run_config(str(run))  # it was orbax's shape error, naming neither the file nor the key
    (run / "config.json").unlink()
    assert load_run_config(str(run)) == expected
    assert f"{run / 'config.json'} not found: using the run's config as its checkpoint saved it ({meta})" in caplog.text
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(FileNotFoundError, match="is not a babylm_jax run directory"):
        load_run_config(str(run))


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
    assert 0 < details["tasks"]["zhoblimp"]["seconds"] < 600  # each task's wall time
    assert "## Failed" in output.with_name("report.md").read_text()


def test_evaluate_writes_no_results_when_every_task_fails(capsys, tmp_path):
    run, data = tmp_path / "run", tmp_path / "data"
    make_run(run)
    shutil.copytree(FIXTURES, data)
    for task in ("xcomps_zh", "hanzi_pinyin"):
        sorted((data / task).glob("*.jsonl"))[0].write_text("{not json\n", encoding="utf-8")
    output = tmp_path / "eval" / "results.json"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("evaluate", evaluate.main, ["evaluate", f"--workdir={run}", f"--data_dir={data}",
                                                      "--tasks=xcomps_zh,hanzi_pinyin", f"--output={output}"])
    said = capsys.readouterr()
    assert exit_info.value.code == cli.EXIT_USER_ERROR
    assert "2 task(s) failed (xcomps_zh, hanzi_pinyin); nothing was scored, so no results are written" in said.out
    assert "the others' results" not in said.out
    assert not (tmp_path / "eval").exists()


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


@pytest.mark.slow
def test_the_tools_replace_an_earlier_output_only_with_overwrite(capsys, tmp_path):
    from babylm_jax.tools import fmri_synth, hanzi_facts

    facts = tmp_path / "facts"
    hanzi_facts.main(["hanzi_facts", f"--out={facts}", "--characters=8", "--seed=1"])
    before = (facts / hanzi_facts.MANIFEST).read_text()
    line = user_error(capsys, hanzi_facts, ["hanzi_facts", f"--out={facts}", "--characters=8", "--seed=2"])
    assert f"--out {facts} holds hanzi facts already" in line and "pass --overwrite" in line
    assert (facts / hanzi_facts.MANIFEST).read_text() == before
    hanzi_facts.main(["hanzi_facts", f"--out={facts}", "--characters=8", "--seed=2", "--overwrite"])
    assert json.loads((facts / hanzi_facts.MANIFEST).read_text())["seed"] == 2

    synth = tmp_path / "synth"
    synth.mkdir()
    (synth / fmri_synth.TRUTH).write_text("{}")
    line = user_error(capsys, fmri_synth, ["fmri_synth", f"--out={synth}", "--snr=2"])
    assert f"--out {synth} holds synth_truth.json already; pass --overwrite" in line
    assert not (synth / fmri_synth.DATA).exists()
    (synth / fmri_synth.DATA).mkdir()
    truth = fmri_synth.generate(synth, seed=1, words_per_split=(40, 20), stories_per_split=(2, 1), sentences_per_story=4,
                                rois=("Language",), roi_voxels=4, overwrite=True)
    assert json.loads((synth / fmri_synth.TRUTH).read_text()) == truth
    assert sorted(p.name for p in synth.iterdir()) == [fmri_synth.DATA, fmri_synth.TRUTH]


def test_the_tools_and_gather_take_options_in_the_one_grammar(capsys, tmp_path):
    from babylm_jax.tools import fmri_synth

    assert user_error(capsys, fmri_synth, ["fmri_synth"]) == "fmri_synth: error: --out is required (see --help)"
    assert "--snr" in user_error(capsys, fmri_synth, ["fmri_synth", f"--out={tmp_path}", "--snr=loud"])
    assert user_error(capsys, evaluate, ["evaluate", "--gather", "--output", str(tmp_path)]) == (
        "evaluate: error: --gather needs at least one RUN: a results.json, or a folder holding one")
    assert "Unknown command line flag 'outptu'. Did you mean: output" in user_error(capsys, evaluate, ["evaluate", "--gather", str(tmp_path), "--outptu=x"])
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_jax_platforms_this_host_lacks_is_named_as_the_environment_variable(tmp_path):
    make_run(tmp_path / "run")
    env = {**os.environ, "JAX_PLATFORMS": "rocm"}
    result = subprocess.run([sys.executable, "-m", "babylm_jax.export", f"--workdir={tmp_path / 'run'}",
                             f"--output={tmp_path / 'hf'}"], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == cli.EXIT_USER_ERROR and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("export: error: environment variable JAX_PLATFORMS='rocm': "
                                                     "Unable to initialize backend 'rocm'")
    assert result.stderr.splitlines()[-1].endswith("unset it (JAX then uses the backends this host has) or name one "
                                                   "it has, e.g. cpu")


def test_a_stop_wrapped_in_a_library_s_error_still_exits_as_the_stop(capsys):
    """jax turns an exception raised while it compares pytree metadata into a ValueError of its own: a stop
    that lands there is still the stop (130 for SIGINT), not a user error (2)."""
    import signal as signals

    from babylm_jax.config import cli as cli_module
    from babylm_jax.core.stops import Stopped

    def work():
        try:
            raise Stopped(signals.SIGINT, "stopped by SIGINT; nothing half-written is kept")
        except Stopped as stop:
            raise ValueError("Exception raised while checking equality of metadata fields of pytree") from stop

    with pytest.raises(SystemExit) as exited:
        cli_module.report_errors("aot", work)
    assert exited.value.code == 130
    assert capsys.readouterr().out == "aot: stopped by SIGINT; nothing half-written is kept\n"


def test_a_device_out_of_memory_is_one_line_saying_what_to_lower(capsys):
    """A model far past the device's memory (model.d_model=10**6) ended train in XLA's RESOURCE_EXHAUSTED traceback."""
    import jax.numpy as jnp

    with pytest.raises(SystemExit) as exited:
        cli.report_errors("train", lambda: jnp.zeros((10**7, 10**6)))  # 40 TB: refused at once
    assert exited.value.code == cli.EXIT_USER_ERROR
    line = capsys.readouterr().err.strip()
    assert line.startswith("train: error: the device ran out of memory (RESOURCE_EXHAUSTED: Out of memory allocating "
                           "40000000000000 bytes")
    assert "lower the model size or the batch sizes" in line and "Traceback" not in line
