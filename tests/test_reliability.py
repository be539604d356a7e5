"""Preemption, damage and misuse: each case below ends in a clear error or an exact resume.

Cases (issue 14):
- SIGTERM / SIGINT / SIGHUP (in a subprocess): the current step finishes, is checkpointed with the data
  iterator, metrics are flushed, one line says where to resume, exit 143 / 130 / 129, no traceback;
  the resumed run is bit-exact; a signal during setup ends at once; the processes of a
  multi-process run agree on the step to stop at;
- a NaN loss stops in one line (exit 2), no traceback, and its state is never saved;
- a damaged latest checkpoint (truncated or missing data file, unreadable state metadata,
  missing state/ or data/, garbage iterator state, metadata without its keys) is moved to
  checkpoints_corrupt/ with a warning and the run resumes bit-exact from the one before;
- no valid checkpoint at all: one clear error, the damaged ones kept;
- config.json is not written by a run refused by the compatibility check (even where
  config.json is missing: the checkpoint's own copy of the config is checked);
- a changed schedule (train.num_steps, ...) is refused by key name unless
  train.allow_schedule_change;
- a second run on a held workdir is refused at once naming the holder's pid; the lock of a
  dead process is taken over; a workdir that cannot be written is named; leftovers of
  interrupted writes are removed at the next start;
- files are written with the user's umask;
- metrics.jsonl: a partial last line is repaired on resume and each step is logged once;
- a token cache or counted corpus shard changed or truncated after prepare is rebuilt, with
  a warning naming the file, never used as it is;
- prepare's worker processes exit when their parent is killed; workers that cannot start (a jieba
  that fails to load, in a subprocess of the real command) stop prepare in one line naming the
  error and the fix, exit 2, within seconds (one worker: the same line, from the parent);
- a truncated .jsonl.gz is a bad line naming file:line (data.on_bad_line='skip' skips the rest);
- evaluate refuses an --output that is a folder or cannot be written before loading anything;
- minimal pairs: an empty sentence, the same sentence twice, or a sentence longer than the
  model's max_len is an error naming file:line; a file without pairs, and a pair read twice, are said.
The command-line cases (unknown config key, missing config file, damaged config.json,
tokenizer.json or checkpoint metadata, batch size against devices, mesh.num_devices,
train.batch_size <= 0, evaluate keeping the finished tasks when a later one fails) are in
tests/test_cli.py.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest
from conftest import tiny_config
from fixtures.cli import user_error

from babylm_jax.config.schema import RunConfig
from babylm_jax import evaluate, prepare
from babylm_jax.core import atomic
from babylm_jax.corpus import tokenizer_training
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.corpus.preparation import prepare_corpus
from babylm_jax.core.stops import Stopped
from babylm_jax.training import checkpoints, compiled, loop
from babylm_jax.training.run_config import load_run_config
from babylm_jax.core.rundir import WorkdirError, workdir_lock


def read_train_losses(workdir) -> list[tuple[int, float]]:
    """(step, loss) of every train record in metrics.jsonl, in file order."""
    records = [json.loads(line) for line in pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def run_config(corpus_dir):
    config = tiny_config(corpus_dir)
    config.train.update(num_steps=8, eval_every_steps=100)
    config.checkpoint.every_steps = 4
    return config


@pytest.fixture(scope="module")
def finished_run(tiny_corpus_dir, tmp_path_factory) -> pathlib.Path:
    """A workdir trained to step 8 with checkpoints at steps 4 and 8."""
    workdir = tmp_path_factory.mktemp("finished") / "run"
    loop.train_and_evaluate(RunConfig.from_config(run_config(tiny_corpus_dir)), str(workdir))
    return workdir


def copy_run(finished_run, tmp_path) -> pathlib.Path:
    workdir = tmp_path / "run"
    shutil.copytree(finished_run, workdir)
    return workdir


def _truncate_data_files(step_dir):
    for f in step_dir.glob("state/**/d/*"):
        f.write_bytes(f.read_bytes()[:10])


DAMAGE = {
    "truncated data files": _truncate_data_files,
    "missing data files": lambda d: [f.unlink() for f in d.glob("state/ocdbt.process_0/d/*")],
    "unreadable state metadata": lambda d: (d / "state" / "_METADATA").write_text("{garbage"),
    "missing state/": lambda d: shutil.rmtree(d / "state"),
    "missing data/": lambda d: shutil.rmtree(d / "data"),
    "garbage iterator state": lambda d: (d / "data" / "metadata").write_text('{"encoding": "dict", "state": {"x": 1}}'),
    "metadata without its keys": lambda d: (d / "meta" / "metadata").write_text('{"step": 8}'),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_latest_checkpoint_is_set_aside_and_the_run_resumes_exactly(damage, finished_run, tiny_corpus_dir, tmp_path):
    workdir = copy_run(finished_run, tmp_path)
    with open(workdir / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "loss": 1.')  # the partial line of a run killed mid-write
    DAMAGE[damage](workdir / "checkpoints" / "8")
    loop.train_and_evaluate(RunConfig.from_config(run_config(tiny_corpus_dir)), str(workdir))
    assert (workdir / "checkpoints_corrupt" / "8").is_dir()  # kept for inspection
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["4", "8"]
    losses = read_train_losses(workdir)
    assert [s for s, _ in losses] == list(range(1, 9))  # each step once, the partial line gone
    assert losses == read_train_losses(finished_run)  # steps 5..8 retrained bit-exact


@pytest.mark.slow
def test_no_valid_checkpoint_is_one_clear_error(finished_run, tiny_corpus_dir, tmp_path):
    workdir = copy_run(finished_run, tmp_path)
    for step in ("4", "8"):
        shutil.rmtree(workdir / "checkpoints" / step / "data")
    config = run_config(tiny_corpus_dir)
    config.train.log_every_steps = 2  # not a resume key: the run would rewrite config.json after a restore
    with pytest.raises(checkpoints.CheckpointError, match="no valid checkpoint.*checkpoints_corrupt"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    assert sorted(p.name for p in (workdir / "checkpoints_corrupt").iterdir()) == ["4", "8"]
    assert json.loads((workdir / "config.json").read_text())["train"]["log_every_steps"] == 1


@pytest.mark.slow
def test_a_refused_config_never_writes_config_json(finished_run, tiny_corpus_dir, tmp_path):
    workdir = copy_run(finished_run, tmp_path)
    (workdir / "config.json").unlink()  # the checkpoints' own copy of the config is checked instead
    config = run_config(tiny_corpus_dir)
    config.model.d_model = 64
    with pytest.raises(checkpoints.CheckpointError, match="model.d_model=32"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    assert not (workdir / "config.json").exists()
    assert not (workdir / "checkpoints_corrupt").exists()


@pytest.mark.slow
def test_schedule_change_is_refused_by_key_unless_allowed(finished_run, tiny_corpus_dir, tmp_path):
    workdir = copy_run(finished_run, tmp_path)
    config = run_config(tiny_corpus_dir)
    config.train.num_steps = 10
    with pytest.raises(checkpoints.CheckpointError, match=r"train.num_steps=8.*allow_schedule_change"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    config.train.warmup_steps = 5
    config.train.num_steps = 8
    with pytest.raises(checkpoints.CheckpointError, match=r"train.warmup_steps=3"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    config.train.update(warmup_steps=3, num_steps=10, allow_schedule_change=True)
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    assert summary["steps"] == 10
    assert load_run_config(str(workdir)).train.num_steps == 10


def test_a_held_workdir_is_refused_naming_the_holder(tmp_path):
    with workdir_lock(tmp_path, "train"):
        with pytest.raises(WorkdirError, match=rf"in use by train pid {os.getpid()}"):
            with workdir_lock(tmp_path, "prepare"):
                pass
    # The lock file of a dead process (no flock held any more) is taken over.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ".lock").write_text(f"train pid {dead.stdout.strip()}\n")
    with workdir_lock(tmp_path, "prepare"):
        assert (tmp_path / ".lock").read_text() == f"prepare pid {os.getpid()}\n"


@pytest.mark.parametrize("workdir", ["file", "file/run"])
def test_a_workdir_that_is_or_lies_in_a_file_is_named(tmp_path, workdir):
    """It was "cannot write in workdir ...: File exists" (or "Not a directory"), not why."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkdirError, match=rf"--workdir .*{workdir}: .*/file is a file, not a folder; give a folder's"):
        with workdir_lock(tmp_path / workdir, "train"):
            pass
    assert (tmp_path / "file").read_text() == "x"


def test_evaluate_and_export_name_a_workdir_that_is_a_file(tmp_path, capsys):
    """evaluate blamed --output ("is not a writable folder; choose another --output"), export said "does not exist"."""
    from babylm_jax import export

    (tmp_path / "file").write_text("x")
    expected = f"--workdir {tmp_path / 'file'} is a file, not a run's folder; give the --workdir train wrote"
    assert user_error(capsys, evaluate, ["evaluate", f"--workdir={tmp_path / 'file'}", f"--data_dir={tmp_path}",
                                         "--tasks=zhoblimp"]) == f"evaluate: error: {expected}"
    assert user_error(capsys, export, ["export", f"--workdir={tmp_path / 'file'}",
                                       f"--output={tmp_path / 'hf'}"]) == f"export: error: {expected}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_second_train_on_a_held_workdir_stops_at_once(tiny_corpus_dir, tmp_path):
    with workdir_lock(tmp_path, "train"):
        with pytest.raises(WorkdirError, match="in use"):
            loop.train_and_evaluate(RunConfig.from_config(run_config(tiny_corpus_dir)), str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]  # nothing prepared or written


def test_prepare_on_a_held_workdir_is_one_line(capsys, tiny_corpus_dir, tmp_path):
    with workdir_lock(tmp_path, "train"):
        line = user_error(capsys, prepare, ["prepare", "--config=configs/base.py", f"--workdir={tmp_path}",
                                            f"--config.data.corpus={tiny_corpus_dir}"])
    assert f"in use by train pid {os.getpid()}" in line


def test_leftovers_of_interrupted_writes_are_removed_at_the_next_start(tmp_path):
    leftovers = [
        tmp_path / ".config.json.tmp-abc123.json",
        tmp_path / "checkpoints" / "12.orbax-checkpoint-tmp-1733",
        tmp_path / "data" / "corpus-1" / "shards" / ".00003.tmp-xyz",
    ]
    kept = [tmp_path / "config.json", tmp_path / "checkpoints" / "8" / "state", tmp_path / "data" / ".hidden",
            tmp_path / "eval" / ".results.json.tmp-abc.json"]  # an evaluate running meanwhile
    for path in leftovers[1:] + kept[1:2]:
        path.mkdir(parents=True)
    for path in leftovers[:1] + kept[:1] + kept[2:]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    with workdir_lock(tmp_path, "train"):
        assert not any(p.exists() for p in leftovers)
        assert all(p.exists() for p in kept)


def test_atomic_files_and_folders_take_the_users_umask(tmp_path):
    umask = atomic._UMASK  # this process's umask, read when atomic was imported
    atomic.atomic_write_json(tmp_path / "results.json", {"a": 1})
    with atomic.atomic_dir(tmp_path / "tokenizer") as folder:
        (folder / "tokenizer.json").write_text("{}")
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "tokenizer").stat().st_mode & 0o777 == 0o777 & ~umask


WORKERS_SCRIPT = """
import os, sys, time
from babylm_jax.core.workers import run_tasks

def record_and_wait(path):
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(120)

if __name__ == "__main__":
    run_tasks(record_and_wait, [(sys.argv[1],)] * 2, workers=2, total=2, desc="wait")
"""


def _running(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_prepare_workers_exit_with_their_parent(tmp_path):
    script, pids_file = tmp_path / "workers.py", tmp_path / "pids.txt"
    script.write_text(WORKERS_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(pids_file)], env=os.environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(pids_file.read_text().split() if pids_file.exists() else []) < 2:
        time.sleep(0.2)
    workers = [int(p) for p in pids_file.read_text().split()]
    assert len(workers) == 2 and all(_running(p) for p in workers)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in workers):
        time.sleep(0.2)
    assert not any(_running(p) for p in workers)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no hang-ups on this platform")
def test_the_processes_a_pool_starts_keep_hang_ups_blocked():
    """A closed terminal hangs up its whole process group: multiprocessing's resource tracker (which ignores only
    SIGINT and SIGTERM) died of it during prepare, with tracebacks; the pool's processes start with it blocked."""
    from babylm_jax.core import workers

    probe = "import signal; print(signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, []))"
    with workers._hang_ups_held():
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "True"
    assert signal.SIGHUP not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the parent's own, back as it was


def test_a_pool_whose_initializer_fails_raises_at_the_first_failure():
    import functools
    import importlib

    from babylm_jax.core.workers import WorkerStartError, run_tasks

    start = time.monotonic()
    with pytest.raises(WorkerStartError) as error:
        run_tasks(print, [(i,) for i in range(8)], workers=2, total=8, desc="demo",
                  initializer=functools.partial(importlib.import_module, "babylm_no_such_module"))
    assert str(error.value) == ("the demo workers could not start: ModuleNotFoundError: No module named "
                                "'babylm_no_such_module'; install the package that provides 'babylm_no_such_module' "
                                "(pip install ...) where the workers run")
    assert time.monotonic() - start < 60


FAKE_JIEBA = "raise RuntimeError('fake jieba: broken install')\n"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 1])
def test_workers_that_cannot_load_jieba_stop_prepare_in_one_line(workers, tiny_corpus_dir, tmp_path):
    (tmp_path / "fake" / "jieba").mkdir(parents=True)
    (tmp_path / "fake" / "jieba" / "__init__.py").write_text(FAKE_JIEBA)
    config = tmp_path / "config.py"
    config.write_text("import pathlib\nfrom fixtures.data.synthetic import tiny_config\n\ndef get_config():\n"
                      f"    return tiny_config(pathlib.Path({str(tiny_corpus_dir)!r}))\n")
    tests = pathlib.Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(tests),
                                                        os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "babylm_jax.prepare", f"--config={config}",
                           f"--workdir={tmp_path / 'run'}", f"--config.data.num_workers={workers}"],
                          env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - start
    lines = [line for line in done.stderr.splitlines() if line.strip() and "it/s" not in line and "shard" not in line]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("prepare: error: ")
    assert "loading jieba failed (RuntimeError: fake jieba: broken install)" in lines[0]
    assert "pip install jieba==0.42.1" in lines[0]
    assert ("the count words workers could not start" in lines[0]) == (workers > 1)
    assert seconds < 60  # seconds, not a respawn loop (the command's imports included)


def _reverse_npy(path):
    np.save(path, np.load(path)[::-1].copy())  # same size, other content


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.parametrize("where,damage", [
    ("tokens-*/tokens.npy", _reverse_npy),
    ("tokens-*/word_starts.npy", _truncate),
    ("shards/00000/texts.json", _truncate),
])
def test_a_changed_cache_is_rebuilt_never_used(where, damage, tiny_corpus_dir, tmp_path, caplog):
    config = tiny_config(tiny_corpus_dir)
    first = prepare_corpus(RunConfig.from_config(config), tmp_path)
    tokens = np.array(first.tokens.tokens)
    [path] = first.corpus.root.glob(where)
    damage(path)
    again = prepare_corpus(RunConfig.from_config(config), tmp_path)
    assert str(path) in caplog.text and "damaged" in caplog.text
    np.testing.assert_array_equal(again.tokens.tokens, tokens)
    assert prepare_corpus(RunConfig.from_config(config), tmp_path).budget_report == first.budget_report


def _pairs_file(tmp_path, rows):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("good,bad,expected", [
    ("", "他把杯子打碎了。", "field 'sentence_good' is empty"),
    ("我们吃饭。", "   ", "field 'sentence_bad' is empty"),
    ("我们吃饭。", "我们吃饭。", "hold the same sentence"),
])
def test_a_broken_minimal_pair_names_its_file_and_line(good, bad, expected, tmp_path):
    rows = [{"sentence_good": "我们吃饭。", "sentence_bad": "我们饭吃。", "UID": "u", "phenomenon": "p"},
            {"sentence_good": good, "sentence_bad": bad, "UID": "u", "phenomenon": "p"}]
    path = _pairs_file(tmp_path, rows)
    with pytest.raises(ValueError, match=rf"{path}:2: .*{expected}"):
        minimal_pairs.read_pairs([path], "zhoblimp")


def test_an_empty_pairs_file_and_a_repeated_pair_are_said(tmp_path, caplog):
    row = {"sentence_good": "我们吃饭。", "sentence_bad": "我们饭吃。", "UID": "u", "phenomenon": "p"}
    path = _pairs_file(tmp_path, [row, {**row, "UID": "v"}, row])  # a file pasted twice, in part
    (tmp_path / "empty.jsonl").write_text("\n")
    assert len(minimal_pairs.read_pairs([path, tmp_path / "empty.jsonl"], "zhoblimp")) == 3  # counted, as officially
    assert f"1 minimal pairs are read more than once (first: {path}:1 again at {path}:3)" in caplog.text
    assert f"{tmp_path / 'empty.jsonl'} holds no minimal pairs (an empty file?)" in caplog.text


def test_a_minimal_pair_longer_than_max_len_names_its_file_and_line(tmp_path):
    rows = [{"sentence_good": "我们吃饭。", "sentence_bad": "我们饭吃。", "UID": "u", "phenomenon": "p"},
            {"sentence_good": "我们吃饭。", "sentence_bad": "我们" * 10 + "饭吃。", "UID": "u", "phenomenon": "p"}]
    path = _pairs_file(tmp_path, rows)
    pairs = minimal_pairs.read_pairs([path], "zhoblimp")
    tokenizer = tokenizer_training.char_tokenizer_from_counts({c: 1 for c in "我们吃饭。"}, 64, 1, byte_fallback=False)
    scorer = types.SimpleNamespace(model=types.SimpleNamespace(config=types.SimpleNamespace(family="causal", max_len=16)),
                                   variant="causal")
    with pytest.raises(ValueError, match=rf"{path}:2: the bad sentence needs 2\d tokens, more than the model's max_len=16"):
        minimal_pairs.score_pairs(scorer, tokenizer, pairs)


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_a_truncated_jsonl_gz_is_a_bad_line(policy, tmp_path):
    import gzip

    from babylm_jax.corpus import sources as corpus
    from babylm_jax.config.data import DataConfig

    rows = "".join(json.dumps({"text": f"第{i}篇文章讲的是今天天气很好。"}, ensure_ascii=False) + "\n" for i in range(400))
    path = tmp_path / "corpus" / "docs.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(rows.encode())[:-40])  # cut short, as by a killed download
    config = tiny_config(tmp_path / "corpus")
    config.data.on_bad_line = policy
    data_config = DataConfig.from_config(config.data)
    documents = lambda: list(corpus.iter_raw_documents(corpus.list_sources(data_config), data_config))  # noqa: E731
    if policy == "stop":
        with pytest.raises(corpus.CorpusError, match=rf"{path}:\d+: the file is damaged or cut short.*on_bad_line='skip'"):
            documents()
    else:
        assert 300 < len(documents()) < 400  # the whole lines before the cut


def _signal_train(corpus_dir, workdir, signal_name="none", at_step=0, nan_at=0) -> subprocess.CompletedProcess:
    script = pathlib.Path(__file__).with_name("signal_train.py")
    return subprocess.run([sys.executable, str(script), str(corpus_dir), str(workdir), signal_name, str(at_step),
                           str(nan_at)], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("signal_name,status", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_a_signal_ends_training_with_a_checkpoint_of_its_step(signal_name, status, finished_run, tiny_corpus_dir,
                                                               tmp_path):
    workdir = tmp_path / "run"
    result = _signal_train(tiny_corpus_dir, workdir, signal_name, at_step=6)
    output = result.stdout + result.stderr
    assert result.returncode == status, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    assert f"stopped by {signal_name} after step 6" in result.stdout and "run the same command to resume" in result.stdout
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["4", "6"]
    assert [s for s, _ in read_train_losses(workdir)] == list(range(1, 7))  # metrics flushed up to the stop
    loop.train_and_evaluate(RunConfig.from_config(run_config(tiny_corpus_dir)), str(workdir))  # resumes at step 7
    assert read_train_losses(workdir) == read_train_losses(finished_run)  # bit-exact, each step once


@pytest.mark.slow
def test_a_signal_before_the_first_step_ends_at_once(tiny_corpus_dir, tmp_path):
    result = _signal_train(tiny_corpus_dir, tmp_path / "run", "SIGTERM", at_step=0)
    assert result.returncode == 143, (result.stdout + result.stderr)[-3000:]
    assert "stopped by SIGTERM before the first training step" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


def test_processes_agree_on_a_stop_every_few_steps(monkeypatch):
    """Process 1 got SIGTERM, process 0 (this one) did not: both stop at the next agreement step."""
    from babylm_jax.training import preemption

    monkeypatch.setattr(preemption.jax, "process_count", lambda: 2)
    monkeypatch.setattr(preemption.multihost_utils, "process_allgather",
                        lambda flag: np.asarray([int(flag), int(signal.SIGTERM)]))
    stop = preemption.StopSignals()
    every = preemption.AGREE_EVERY_STEPS
    assert not stop.should_stop(every + 1) and not stop.requested
    assert stop.should_stop(2 * every) and stop.signal_name == "SIGTERM"
    assert stop.stopped("...").exit_status == 143


@pytest.mark.slow
def test_a_nan_loss_stops_in_one_line_and_saves_no_nan_state(tiny_corpus_dir, tmp_path):
    workdir = tmp_path / "run"
    result = _signal_train(tiny_corpus_dir, workdir, nan_at=4)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert "train: error: loss is nan at step 4; lower train.learning_rate" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (workdir / "checkpoints" / "4").exists()  # the checkpoint of step 4 would hold NaN params


@pytest.mark.parametrize("output,expected", [
    ("folder", "is a folder; give the path of results.json"),
    ("file/results.json", "is not a writable folder; choose another --output"),
])
def test_evaluate_refuses_a_bad_output_before_loading_anything(output, expected, capsys, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "data").mkdir()
    line = user_error(capsys, evaluate, ["evaluate", f"--workdir={tmp_path / 'no_run'}", f"--data_dir={tmp_path / 'data'}",
                                         f"--output={tmp_path / output}"])
    assert f"--output {tmp_path / output}" in line and expected in line


@pytest.mark.parametrize("where", ["restoring", "compiling"])
def test_a_stop_before_the_first_step_closes_the_checkpointer(tiny_corpus_dir, tmp_path, monkeypatch, where):
    """orbax's threads end with the run, not at the interpreter's exit (where they printed a traceback under the
    stop line: 'cannot schedule new futures after interpreter shutdown')."""
    closed, real_close = [], checkpoints.Checkpointer.close
    monkeypatch.setattr(checkpoints.Checkpointer, "close", lambda self: (closed.append(True), real_close(self)))

    def stop(*args, **kwargs):
        raise Stopped(signal.SIGINT, "stopped")

    if where == "restoring":  # in setup, between the checkpointer's start and the run's hand-over
        monkeypatch.setattr(checkpoints.Checkpointer, "restore_latest", stop)
    else:  # in the compiles before step 1
        monkeypatch.setattr(compiled.StepPrograms, "compile_all", stop)
    with pytest.raises(Stopped):
        loop.train_and_evaluate(RunConfig.from_config(tiny_config(tiny_corpus_dir)), str(tmp_path / "run"))
    assert closed == [True]
