"""A disk that fills up during a run: one line naming the folder and the space, no temporary
folders left, the last complete checkpoint intact and resumable (issue 27)."""
import contextlib
import os
import pathlib
import shutil
import subprocess
from collections import namedtuple

import pytest
from conftest import tiny_config
from fixtures.cli import user_error
from fixtures.data import synthetic
from fixtures.run import make_run

from babylm_jax import evaluate, export, prepare
from babylm_jax.config.schema import RunConfig
from babylm_jax.config import cli
from babylm_jax.training import disk_space
from babylm_jax.training import loop

pytestmark = pytest.mark.slow  # each test trains a run or prepares a corpus to fill a disk
FIXTURES = pathlib.Path(__file__).parent / "fixtures"

Usage = namedtuple("Usage", "total used free")


def _train_line(capfd, config, workdir) -> str:
    """train_and_evaluate under the command line's error path: exit 2 and its one error line, and
    nothing of orbax's threads on stderr (read at the file descriptor: absl's handler writes there)."""
    capfd.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("train", loop.train_and_evaluate, RunConfig.from_config(config), str(workdir))
    assert exit_info.value.code == cli.EXIT_USER_ERROR
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RESOURCE_EXHAUSTED" not in err, err[-2000:]
    (line,) = [line for line in err.splitlines() if "train: error:" in line]
    return line


def _leftovers(workdir: pathlib.Path) -> list[str]:
    return [p.name for p in workdir.rglob("*") if disk_space.TEMP_SUFFIX in p.name]


def test_a_checkpoint_that_will_not_fit_is_refused_before_it_is_written(capfd, tiny_corpus_dir, tmp_path,
                                                                         monkeypatch):
    config = tiny_config(tiny_corpus_dir)
    real_usage, calls = shutil.disk_usage, []

    def usage(path):  # room for the first checkpoint (step 10), then a full disk
        calls.append(path)
        return real_usage(path) if len(calls) == 1 else Usage(10**9, 10**9 - 1000, 1000)

    monkeypatch.setattr(disk_space.shutil, "disk_usage", usage)
    line = _train_line(capfd, config, tmp_path)
    assert f"no space left for checkpoint 20 in {tmp_path / 'checkpoints'}: it needs about" in line
    assert "0.0 MB are free" in line and "run the same command to resume" in line
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10"] and not _leftovers(tmp_path)

    monkeypatch.setattr(disk_space.shutil, "disk_usage", real_usage)  # space freed: the run resumes from step 10
    assert loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))["steps"] == 30


def test_a_disk_that_fills_during_the_save_is_one_line_and_leaves_no_temporaries(capfd, tiny_corpus_dir, tmp_path,
                                                                                 monkeypatch):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root (the fill-during-save path; the check before a save is "
                    "tested above)")
    try:
        config = tiny_config(tiny_corpus_dir)
        config.train.num_steps = 10
        workdir = mount / "run"
        loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
        checkpoint_bytes = sum(f.stat().st_size for f in (workdir / "checkpoints" / "10").rglob("*") if f.is_file())
        free = shutil.disk_usage(mount).free
        (mount / "filler").write_bytes(b"\0" * (free - checkpoint_bytes // 3))  # a third of a checkpoint left
        monkeypatch.setattr(disk_space, "check_room", lambda *args: None)  # as if the disk filled meanwhile
        config.train.update(num_steps=20, allow_schedule_change=True)
        line = _train_line(capfd, config, workdir)
        assert f"no space left for a checkpoint in {workdir / 'checkpoints'}" in line
        assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["10"] and not _leftovers(workdir)
        (mount / "filler").unlink()
        assert loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))["steps"] == 20
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.contextmanager
def _small_disk(tmp_path: pathlib.Path, size: str, leave: int | None = None):
    """A tmpfs of `size` mounted at tmp_path/disk (skips without root); `leave`: fill it up to that many free bytes."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        if leave is not None:
            (mount / "filler").write_bytes(b"\0" * (shutil.disk_usage(mount).free - leave))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_prepare_on_a_full_disk_says_where_how_much_and_what_to_do(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "docs.txt").write_text("\n\n".join(synthetic.svo_documents(20000)) + "\n", encoding="utf-8")
    with _small_disk(tmp_path, "1m") as disk:
        line = user_error(capsys, prepare, ["prepare", "--config=configs/base.py", f"--workdir={disk / 'run'}",
                                            f"--config.data.corpus={corpus}", "--config.data.num_workers=1"])
    assert line.startswith(f"prepare: error: no space left for the prepared data in {disk / 'run'}: it needs about ")
    assert "times the corpus's 2.0 MB" in line and "MB are free; free some space" in line
    assert "run the same command" in line


def test_export_and_evaluate_on_a_full_disk_say_where_how_much_and_what_to_do(capsys, tmp_path):
    run, data = tmp_path / "run", tmp_path / "data"
    make_run(run)
    shutil.copytree(FIXTURES / "minimal_pairs" / "zhoblimp", data / "zhoblimp")
    with _small_disk(tmp_path, "1m", leave=8192) as disk:
        line = user_error(capsys, export, ["export", f"--workdir={run}", f"--output={disk / 'hf'}"])
        assert line.startswith(f"export: error: no space left for the export in {disk}: it needs about ")
        assert "MB (the weights)" in line and "nothing half-written is kept" in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        line = user_error(capsys, evaluate, ["evaluate", f"--workdir={run}", f"--data_dir={data}", "--tasks=zhoblimp",
                                             f"--output={disk / 'eval' / 'results.json'}"])
        assert line.startswith(f"evaluate: error: no space left for the results in {disk / 'eval'}: it needs a few MB")


def test_an_aot_dump_on_a_full_disk_says_where_and_how_much(tmp_path):
    from babylm_jax.training import aot_report

    with _small_disk(tmp_path, "64k") as disk:
        with pytest.raises(OSError, match=r"^no space left for train_step_32.tpu.hlo.txt in .*/disk/dump: it needs "
                                          r"0.2 MB and 0.\d MB are free; free some space or give --dump a folder"):
            aot_report.dump(str(disk / "dump"), "train_step_32.tpu.hlo.txt", "x" * 200_000)
        assert not list((disk / "dump").iterdir())
