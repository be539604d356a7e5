"""Nothing a user types destroys a run (issue 27): outputs never over inputs, failed evaluations
never over good results, one writer per output, live checkpoints never read, values checked.

Cases:
- export --output at the workdir (with --overwrite), or at a folder holding it: refused, run intact;
- export --overwrite replaces an earlier export, never a folder export did not write;
- a killed export's temporary folder is removed by the next export; files get the umask's mode;
- evaluate --output over the run's config.json, inside checkpoints/, or inside --data_dir: refused;
- an evaluation with a failed task beside earlier results: those stay, the new ones go to a
  new folder, said in the output; complete results replace earlier ones and their stale figures;
- a second command writing the same output meanwhile: refused naming the holder;
- aot --dump, evaluate --output, export --output in a place no file can be created: one line
  naming the flag and the path, before any work (issue 35);
- evaluate while train holds the workdir: refused for a rotating checkpoint, allowed for a milestone;
- a learning rate, mask rate or share out of range: one line naming the key.
"""
import json
import os
import pathlib
import shutil

import pytest
from fixtures.cli import unwritable_folder, user_error
from fixtures.run import make_run

from babylm_jax import aot, evaluate, export, prepare, sample, train
from babylm_jax.config import cli
from babylm_jax.core import atomic, outputs
from babylm_jax.core.rundir import workdir_lock

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


def tree(path: pathlib.Path) -> dict[str, int]:
    """Every file under `path` and its size: what must not change."""
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def run(tmp_path) -> pathlib.Path:
    make_run(tmp_path / "run")
    return tmp_path / "run"


def test_export_never_writes_over_or_around_its_run(capsys, run, tmp_path):
    before = tree(run)
    for output in (run, tmp_path, run / "checkpoints" / "hf", run / "tokenizer"):
        line = user_error(capsys, export, ["export", f"--workdir={run}", f"--output={output}", "--overwrite"])
        assert str(output) in line and "choose" in line
    assert tree(run) == before


def test_export_overwrite_replaces_only_an_earlier_export(capsys, run, tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    line = user_error(capsys, export, ["export", f"--workdir={run}", f"--output={mine}", "--overwrite"])
    assert "was not written by export" in line
    assert tree(mine) == {"notes.txt": 4}

    out = tmp_path / "hf"
    export.main(["export", f"--workdir={run}", f"--output={out}"])
    (tmp_path / ".hf.tmp-killed").mkdir()  # what a killed export leaves
    (tmp_path / ".hf.tmp-killed" / "model.safetensors").write_bytes(b"partial")
    export.main(["export", f"--workdir={run}", f"--output={out}", "--overwrite"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "mine", "run"]
    mode = (out / "model.safetensors").stat().st_mode & 0o777
    assert mode == atomic.default_file_mode()


def test_evaluate_never_writes_over_the_run_or_its_data(capsys, run, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    before, data_before = tree(run), tree(data)
    for output in (run / "config.json", run / "checkpoints" / "results.json", data / "results.json", run):
        line = user_error(capsys, evaluate, ["evaluate", f"--workdir={run}", f"--data_dir={data}",
                                             f"--output={output}", "--tasks=zhoblimp"])
        assert str(output) in line
    assert tree(run) == before and tree(data) == data_before


def _evaluate(run, data, output, tasks):
    return ["evaluate", f"--workdir={run}", f"--data_dir={data}", f"--output={output}", f"--tasks={tasks}",
            "--config.scoring.batch_size=8"]


def test_a_failed_evaluation_keeps_the_earlier_results(capsys, run, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    output = tmp_path / "eval" / "results.json"
    output.parent.mkdir()
    (output.parent / ".results.json.tmp-killed").write_text("{")  # what an evaluation killed mid-write leaves
    evaluate.main(_evaluate(run, data, output, "zhoblimp,xcomps_zh"))
    assert not (output.parent / ".results.json.tmp-killed").exists()
    good = output.read_text()
    assert set(json.loads(good)) == {"zhoblimp", "xcomps_zh"}

    broken = sorted((data / "xcomps_zh").glob("*.jsonl"))[0]
    broken.write_text('{"acceptable_sent": "好"}\n', encoding="utf-8")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("evaluate", evaluate.main, _evaluate(run, data, output, "zhoblimp,xcomps_zh"))
    said = capsys.readouterr()
    assert exit_info.value.code == cli.EXIT_USER_ERROR and "missing field 'unacceptable_sent'" in said.err
    assert output.read_text() == good
    (partial,) = output.parent.glob("results.incomplete-*/results.json")
    assert set(json.loads(partial.read_text())) == {"zhoblimp"}
    assert f"the earlier results at {output} stay as they are" in said.out and str(partial.parent) in said.out

    # Complete results replace the earlier ones, and figures of tasks they no longer hold go.
    stale = output.parent / "xcomps_zh_per_phenomenon.png"
    stale.write_bytes(b"png")
    details = json.loads(output.with_name("results_details.json").read_text())
    details["files"].append(stale.name)
    output.with_name("results_details.json").write_text(json.dumps(details))
    evaluate.main(_evaluate(run, data, output, "zhoblimp"))
    assert set(json.loads(output.read_text())) == {"zhoblimp"} and not stale.exists()


def test_one_writer_per_output_and_no_reads_of_live_checkpoints(capsys, run, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    output = tmp_path / "eval" / "results.json"
    with outputs.output_lock(output, "evaluate"):
        line = user_error(capsys, evaluate, _evaluate(run, data, output, "zhoblimp"))
        assert f"being written by evaluate pid {os.getpid()}" in line
    assert not output.parent.exists()  # the lock file goes with its holder, and the folder it made

    with workdir_lock(run, "train"):
        line = user_error(capsys, evaluate, _evaluate(run, data, output, "zhoblimp"))
        assert f"a run is active in {run} (train pid {os.getpid()})" in line and "word-milestone" in line
        os.rename(run / "checkpoints", run / "milestones")  # a milestone checkpoint is never rotated away
        evaluate.main(_evaluate(run, data, output, "zhoblimp"))
    assert set(json.loads(output.read_text())) == {"zhoblimp"}


@pytest.mark.parametrize("override,key", [
    ("--config.train.learning_rate=-0.001", "train.learning_rate=-0.001: must be > 0"),
    ("--config.train.mask_rate=1.5", "train.mask_rate=1.5: must be in [0, 1)"),
    ("--config.train.hybrid_causal_share=2.0", "train.hybrid_causal_share=2.0: must be in [0, 1]"),
    ("--config.train.weight_decay=-1.0", "train.weight_decay=-1.0: must be >= 0"),
    ("--config.train.b2=1.0", "train.b2=1.0: must be in [0, 1)"),
    ("--config.train.writers=('jsonl', 'mlflow')", "train.writers=('jsonl', 'mlflow'): must name writers of"),
])
def test_values_no_one_means_are_refused_by_key(capsys, tmp_path, override, key):
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", override])
    assert key in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command,argv,says", [
    (train, ["train", "--config=CONFIGS/base.py", "--workdir=hf://bucket/run"], "hf:// is not a filesystem"),
    (prepare, ["prepare", "--config=CONFIGS/base.py", "--workdir=az://bucket/run"], "az:// is not a filesystem"),
    (evaluate, ["evaluate", "--workdir=WORKDIR", "--data_dir=gs://bucket/data"], "--data_dir=gs://bucket/data: a remote"),
    (export, ["export", "--workdir=WORKDIR", "--output=gs://bucket/hf"], "--output=gs://bucket/hf: a remote path"),
    (sample, ["sample", "--workdir=WORKDIR", "--prompts=gs://bucket/p.txt"], "--prompts=gs://bucket/p.txt: a remote"),
])
def test_remote_paths_where_none_can_go_are_refused_not_written_to_a_local_folder(capsys, run, tmp_path, monkeypatch,
                                                                                 command, argv, says):
    """Buckets are workdirs (tests/test_remote_workdir.py); elsewhere a remote path is one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    configs = pathlib.Path(__file__).parents[1] / "configs"
    argv = [a.replace("WORKDIR", str(run)).replace("CONFIGS", str(configs)) for a in argv]
    line = user_error(capsys, command, argv)
    assert says in line
    assert not any(p.name.endswith(":") for p in tmp_path.iterdir())  # no local "gs:" folder


def test_an_unwritable_output_is_refused_before_any_work(capsys, run, tmp_path):
    place = unwritable_folder(tmp_path)
    line = user_error(capsys, aot, ["aot", "--config=configs/base.py", "--platform=cuda", f"--dump={place}"])
    assert line.startswith(f"aot: error: --dump {place}: cannot write there (") and "writable folder for --dump" in line
    line = user_error(capsys, export, ["export", f"--workdir={run}", f"--output={place / 'hf'}"])
    assert line.startswith(f"export: error: --output {place}: cannot write there (")
    line = user_error(capsys, evaluate, ["evaluate", f"--workdir={run}", f"--data_dir={FIXTURES}", "--tasks=xcomps_zh",
                                         f"--output={place / 'results.json'}"])
    assert f"--output {place}" in line and ("cannot write there" in line or "is not a writable folder" in line)
