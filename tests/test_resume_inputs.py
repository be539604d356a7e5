"""A run is what it was started as (issue 35): a resume onto other inputs is refused, a changed schedule is said.

- a changed, added or removed corpus file, a damaged tokenizer file or a damaged record of the
  inputs (inputs.json) refuses the resume in one line naming the file (exit 2), before any work:
  the workdir is left as it was;
- unchanged inputs resume bit-exactly; a run older than the record resumes, records and says so;
- a run copied with its corpus to another place (new paths, fresh mtimes) resumes bit-exactly with one
  line saying the corpus moved, counting and tokenising nothing; moved and changed, it is refused naming
  the file; a record that named files by their configured paths still resumes;
- train.allow_schedule_change logs the changed keys and the learning rate before and after.
"""
import json
import os
import pathlib
import re
import shutil
import time

import pytest
from conftest import tiny_config
from fixtures.data import synthetic

from babylm_jax.config.schema import RunConfig
from babylm_jax.config import cli
from babylm_jax.core import rundir
from babylm_jax.training import loop

pytestmark = pytest.mark.slow  # the module's run is trained, then resumed by each test


def run_config(corpus_dir: pathlib.Path):
    config = tiny_config(corpus_dir)
    config.train.update(num_steps=8, eval_every_steps=100)
    config.checkpoint.every_steps = 4
    return config


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """(corpus folder of a.txt and b.txt, a workdir trained on it to step 8 with checkpoints at 4 and 8)."""
    root = tmp_path_factory.mktemp("started")
    corpus = synthetic.write_txt_corpus(root / "corpus", 300)
    loop.train_and_evaluate(RunConfig.from_config(run_config(corpus)), str(root / "run"))
    return corpus, root / "run"


@pytest.fixture
def corpus(started, tmp_path) -> pathlib.Path:
    """The run's corpus folder, put back as it was (bytes and mtimes) after the test."""
    folder = started[0]
    shutil.copytree(folder, tmp_path / "corpus_kept")
    yield folder
    shutil.rmtree(folder)
    shutil.copytree(tmp_path / "corpus_kept", folder)


@pytest.fixture
def workdir(started, tmp_path) -> pathlib.Path:
    """A copy of the run without its last checkpoint (resuming trains steps 5..8 again)."""
    copy = tmp_path / "run"
    shutil.copytree(started[1], copy)
    shutil.rmtree(copy / rundir.CHECKPOINTS / "8")
    return copy


def listing(folder: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` but the lock file: path -> (bytes, mtime in ns)."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.name != rundir.LOCK_FILE}


def refusal(capsys, config, workdir: pathlib.Path) -> str:
    """The one error line of a resume refused through the commands' error path (exit 2); the workdir unchanged."""
    before = listing(workdir)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("train", loop.train_and_evaluate, RunConfig.from_config(config), str(workdir))
    assert exit_info.value.code == cli.EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert "Resuming" not in captured.out and "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: ")
    assert listing(workdir) == before  # no budget.json rewrite, no new cache, no config.json
    return lines[0]


def _append_document(corpus: pathlib.Path) -> None:
    with open(corpus / "a.txt", "a", encoding="utf-8") as f:
        f.write("\n他们今天去公园散步。\n")


def _same_size_edit(corpus: pathlib.Path) -> None:
    text = (corpus / "a.txt").read_text(encoding="utf-8")
    (corpus / "a.txt").write_text(text[:-2] + ("。" if text[-2] != "。" else "！") + text[-1], encoding="utf-8")


CHANGES = {
    "appended": (_append_document, r"corpus file \S*a\.txt has [\d,]+ bytes, [\d,]+ were recorded"),
    "same size": (_same_size_edit, r"corpus file \S*a\.txt has changed \(same size, its sha256 differs\)"),
    "added": (lambda c: (c / "c.txt").write_text("新的文件。\n", encoding="utf-8"), r"corpus file \S*c\.txt was added"),
    "removed": (lambda c: (c / "b.txt").unlink(), r"corpus file \S*b\.txt was removed"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_corpus_is_refused_naming_the_file(change, corpus, workdir, capsys):
    edit, named = CHANGES[change]
    edit(corpus)
    line = refusal(capsys, run_config(corpus), workdir)
    assert re.search(named, line), line
    assert "restore the inputs it was started from, or start a new --workdir" in line


def test_prepare_on_a_trained_workdir_refuses_a_changed_corpus(corpus, workdir, capsys):
    from babylm_jax import prepare

    config_file = workdir.parent / "config.py"
    config_file.write_text("import pathlib\nfrom fixtures.data.synthetic import tiny_config\n\ndef get_config():\n"
                           f"    return tiny_config(pathlib.Path({str(corpus)!r}))\n", encoding="utf-8")
    _append_document(corpus)
    before = listing(workdir)
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("prepare", prepare.main, ["prepare", f"--config={config_file}", f"--workdir={workdir}"])
    assert exit_info.value.code == cli.EXIT_USER_ERROR
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("prepare: error: ") and re.search(CHANGES["appended"][1], line), line
    assert listing(workdir) == before


def test_a_damaged_tokenizer_is_refused_naming_the_file(started, workdir, capsys):
    path = workdir / rundir.TOKENIZER / "tokenizer.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    line = refusal(capsys, run_config(started[0]), workdir)
    assert re.search(r"tokenizer file tokenizer/tokenizer\.json has [\d,]+ bytes, [\d,]+ were recorded", line), line


def test_a_damaged_record_is_refused_naming_it(started, workdir, capsys):
    record = workdir / rundir.INPUTS
    record.write_text(record.read_text()[:40])
    line = refusal(capsys, run_config(started[0]), workdir)
    assert f"{record}:" in line and "not valid JSON" in line and "start a new --workdir" in line


def read_train(workdir: pathlib.Path) -> dict[int, dict]:
    records = [json.loads(line) for line in (workdir / rundir.METRICS).read_text().splitlines()]
    return {r["step"]: r for r in records if "loss" in r}


def test_unchanged_inputs_resume_bit_exactly(started, workdir, capsys):
    record = (workdir / rundir.INPUTS).read_text()
    assert set(json.loads(record)["tokenizer"]) >= {"tokenizer/tokenizer.json"}
    loop.train_and_evaluate(RunConfig.from_config(run_config(started[0])), str(workdir))
    assert "Resuming" in capsys.readouterr().out
    assert {s: r["loss"] for s, r in read_train(workdir).items()} == {s: r["loss"] for s, r in read_train(started[1]).items()}
    assert (workdir / rundir.INPUTS).read_text() == record


def test_a_run_without_a_record_resumes_records_and_says_so(started, workdir, capsys):
    (workdir / rundir.INPUTS).unlink()
    loop.train_and_evaluate(RunConfig.from_config(run_config(started[0])), str(workdir))
    out = capsys.readouterr().out
    assert sum("has no record of the inputs it was started from" in line for line in out.splitlines()) == 1
    assert json.loads((workdir / rundir.INPUTS).read_text()) == json.loads((started[1] / rundir.INPUTS).read_text())
    assert {s: r["loss"] for s, r in read_train(workdir).items()} == {s: r["loss"] for s, r in read_train(started[1]).items()}


def test_a_schedule_change_says_the_learning_rate_before_and_after(started, tmp_path, capsys):
    workdir = tmp_path / "run"
    shutil.copytree(started[1], workdir)
    config = run_config(started[0])
    config.train.update(num_steps=10, allow_schedule_change=True)
    loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("train.allow_schedule_change")]
    train = read_train(workdir)
    assert lines == [f"train.allow_schedule_change: the schedule changes from step 9 on (train.num_steps 8 -> 10); "
                     f"learning rate {train[8]['learning_rate']:.3g} at step 8 (old schedule), "
                     f"{train[9]['learning_rate']:.3g} at step 9 (new schedule)"]


def moved(started, tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """(corpus, run) copied as `cp -r` copies: new paths, fresh mtimes; the run without its last checkpoint."""
    corpus = shutil.copytree(started[0], tmp_path / "elsewhere" / "corpus", copy_function=shutil.copy)
    run = shutil.copytree(started[1], tmp_path / "elsewhere" / "run", copy_function=shutil.copy)
    shutil.rmtree(run / rundir.CHECKPOINTS / "8")
    later = time.time() + 1
    for path in [*corpus.rglob("*"), *run.rglob("*")]:
        os.utime(path, (later, later))
    return corpus, run


def test_a_run_moved_with_its_corpus_resumes_with_nothing_counted(started, tmp_path, capsys, monkeypatch):
    from babylm_jax.corpus import corpus_cache
    from babylm_jax.corpus import token_cache

    corpus, run = moved(started, tmp_path)
    runs = []
    for module in (corpus_cache, token_cache):
        monkeypatch.setattr(module, "run_tasks", lambda fn, *args, **kwargs: runs.append(fn.__name__))
    loop.train_and_evaluate(RunConfig.from_config(run_config(corpus)), str(run))
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if line.startswith("the corpus moved")]
    assert said == [f"the corpus moved (data.corpus {str(started[0])!r} -> {str(corpus)!r}); its files' content is "
                    "the same as the run was started from (inputs.json: names, sizes, sha256): resuming"]
    assert any(line.startswith("Resuming") for line in out) and runs == []
    assert {s: r["loss"] for s, r in read_train(run).items()} == {s: r["loss"] for s, r in read_train(started[1]).items()}


def test_a_run_moved_with_a_changed_corpus_is_refused_naming_the_file(started, tmp_path, capsys):
    corpus, run = moved(started, tmp_path)
    _same_size_edit(corpus)
    line = refusal(capsys, run_config(corpus), run)
    assert re.search(r"corpus file a\.txt has changed \(same size, its sha256 differs\)", line), line


def test_a_record_of_configured_paths_still_resumes(started, workdir, capsys):
    record = json.loads((workdir / rundir.INPUTS).read_text())
    record["corpus"] = {str(started[0] / name): value for name, value in record.pop("corpus").items()}
    record.pop("names")
    (workdir / rundir.INPUTS).write_text(json.dumps(record))
    loop.train_and_evaluate(RunConfig.from_config(run_config(started[0])), str(workdir))
    assert "Resuming" in capsys.readouterr().out


def _new_characters(corpus: pathlib.Path) -> None:
    """A file whose characters outnumber most of the corpus's: the char tokenizer rebuilt from it gives ids to
    other pieces."""
    (corpus / "c.txt").write_text("\n\n".join(["龙凤麒麟鹤龟"] * 400) + "\n", encoding="utf-8")


def test_a_run_without_a_record_resumed_onto_another_vocabulary_is_refused_naming_both(corpus, workdir, capsys):
    """A run copied without inputs.json (or older than it) onto a changed corpus was resumed "as before" with
    a tokenizer rebuilt from it; the checkpoint knows its vocabulary, and the tokenizer/ of the workdir stays."""
    (workdir / rundir.INPUTS).unlink()
    _new_characters(corpus)
    kept = {name: listing(workdir / name) for name in (rundir.TOKENIZER, rundir.CHECKPOINTS)}
    config_json = (workdir / rundir.CONFIG).read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("train", loop.train_and_evaluate, RunConfig.from_config(run_config(corpus)), str(workdir))
    assert exit_info.value.code == cli.EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert "Resuming" not in captured.out and "resumed as before" not in captured.out
    line = captured.err.strip().splitlines()[-1]
    vocabulary = r"a char tokenizer of 64 ids \(vocabulary [0-9a-f]{16}\)"
    assert re.fullmatch(rf"train: error: checkpoint \S+/checkpoints/4 was trained with {vocabulary}, but the tokenizer "
                        rf"of this run's corpus and settings is {vocabulary}: its ids would mean other pieces; give "
                        r"data.corpus and data.paths the corpus it was trained on .*", line), line
    assert {name: listing(workdir / name) for name in kept} == kept
    assert (workdir / rundir.CONFIG).read_bytes() == config_json and not (workdir / rundir.INPUTS).exists()


def test_a_checkpoint_older_than_its_vocabulary_record_resumes_with_one_line(started, workdir, capsys):
    meta_file = workdir / rundir.CHECKPOINTS / "4" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    del meta["vocabulary"]
    meta_file.write_text(json.dumps(meta))
    loop.train_and_evaluate(RunConfig.from_config(run_config(started[0])), str(workdir))
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if "does not record the vocabulary" in line] == [
        f"checkpoint {workdir}/checkpoints/4 does not record the vocabulary it was trained with (written by an older "
        "babylm_jax): resumed with the workdir's tokenizer as it is; every checkpoint from now on records it"]
    assert {s: r["loss"] for s, r in read_train(workdir).items()} == {s: r["loss"] for s, r in read_train(started[1]).items()}


def test_evaluation_and_export_refuse_a_tokenizer_the_checkpoint_was_not_trained_with(workdir):
    from babylm_jax.corpus.tokenizer import CharTokenizer
    from babylm_jax.training.checkpoints import load_for_eval
    from babylm_jax.training.run_config import CheckpointError

    shutil.rmtree(workdir / rundir.TOKENIZER)
    CharTokenizer(list("龙凤麒麟鹤龟"), byte_fallback=False).save(workdir / rundir.TOKENIZER)
    with pytest.raises(CheckpointError, match=r"was trained with a char tokenizer of 64 ids .* but the tokenizer in "
                       r"\S+/tokenizer is a char tokenizer of 13 ids .*put back the tokenizer/ folder"):
        load_for_eval(str(workdir))


def test_a_run_copied_without_its_tokenizer_makes_it_again_and_resumes(started, workdir, capsys):
    """A half-copied run (no tokenizer/) was refused as 'tokenizer file ... was removed', though its corpus
    gives the same tokenizer back, which the checkpoint's vocabulary checks."""
    shutil.rmtree(workdir / rundir.TOKENIZER)
    loop.train_and_evaluate(RunConfig.from_config(run_config(started[0])), str(workdir))
    assert "Resuming" in capsys.readouterr().out
    assert listing(workdir / rundir.TOKENIZER).keys() == listing(started[1] / rundir.TOKENIZER).keys()
    assert {s: r["loss"] for s, r in read_train(workdir).items()} == {s: r["loss"] for s, r in read_train(started[1]).items()}
