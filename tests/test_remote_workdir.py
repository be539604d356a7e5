"""Workdirs on a remote filesystem (core.remote), against a fake Google Cloud Storage on localhost."""
import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest
from conftest import tiny_config
from fixtures.cli import user_error
from fixtures.fake_gcs import fake_gcs, free_port

from babylm_jax.config.schema import RunConfig
from babylm_jax.core import remote, rundir
from babylm_jax.training import loop

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


@pytest.fixture(scope="module")
def bucket():
    with fake_gcs("bkt"):
        yield "gs://bkt"


def _metrics(text: str) -> dict[int, dict]:
    records = [json.loads(line) for line in text.splitlines()]
    return {r["step"]: r for r in records if "eval_loss" not in r}


@pytest.mark.slow
def test_push_sends_changed_files_and_pull_checks_each_hash(bucket, tmp_path):
    from etils import epath

    url = f"{bucket}/mirror-test"
    a = remote.Mirror(url, tmp_path / "a")
    (tmp_path / "a" / "data" / "tokens").mkdir(parents=True)
    (tmp_path / "a" / "data" / "tokens" / "tokens.npy").write_bytes(b"\x01\x02" * 1000)
    (tmp_path / "a" / "config.json").write_text('{"a": 1}')
    (tmp_path / "a" / rundir.LOCK_FILE).write_text("train pid 1")  # never leaves the host
    (tmp_path / "a" / "checkpoints" / "10").mkdir(parents=True)  # orbax writes these to the bucket itself
    (tmp_path / "a" / "checkpoints" / "10" / "x").write_text("x")
    (tmp_path / "a" / ".summary.json.tmp-1").write_text("half")  # an interrupted write
    with pytest.raises(remote.RemoteError, match=r"--workdir=gs://nobucket/r: bucket gs://nobucket does not exist"):
        remote.RunPlace.reached("gs://nobucket/r")
    assert a.push() == ["config.json", "data/tokens/tokens.npy"]
    assert sorted(json.loads(epath.Path(url, remote.FILE_LIST).read_text())) == ["config.json", "data/tokens/tokens.npy"]
    assert a.push() == []  # nothing changed: nothing sent

    b = remote.Mirror(url, tmp_path / "b")
    assert b.pull() == ["config.json", "data/tokens/tokens.npy"]
    assert (tmp_path / "b" / "data" / "tokens" / "tokens.npy").read_bytes() == b"\x01\x02" * 1000
    assert b.pull() == []

    (tmp_path / "a" / "config.json").write_text('{"a": 2}')
    (tmp_path / "a" / "data" / "tokens" / "tokens.npy").unlink()
    assert a.push() == ["config.json"]
    assert not epath.Path(url, "data/tokens/tokens.npy").exists()  # gone from the mirror: gone from the bucket
    assert b.pull() == ["config.json"] and (tmp_path / "b" / "config.json").read_text() == '{"a": 2}'

    d = remote.Mirror(url, tmp_path / "d")  # a host that never pulled: adds its file, deletes nothing
    (tmp_path / "d" / "notes.txt").parent.mkdir()
    (tmp_path / "d" / "notes.txt").write_text("n")
    assert d.push() == ["notes.txt"]
    assert sorted(d.remote_files()) == ["config.json", "notes.txt"]

    epath.Path(url, "config.json").write_text('{"a": 3}')  # changed behind the file list's back
    c = remote.Mirror(url, tmp_path / "c")
    with pytest.raises(remote.RemoteError, match=r"config.json arrived with sha256 .* records"):
        c.pull()
    assert not (tmp_path / "c" / "config.json").exists() and not list((tmp_path / "c").iterdir())


def test_a_remote_workdir_needs_a_folder_and_a_mirror_per_host(monkeypatch, tmp_path):
    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path))
    assert remote.mirror_folder("gs://b/runs/r1") == tmp_path / "workdirs" / "gs" / "b" / "runs" / "r1"
    with pytest.raises(remote.RemoteError, match=r"gs://BUCKET/runs/NAME"):
        remote.mirror_folder("gs://")
    assert remote.RunPlace.of(str(tmp_path / "w")).mirror is None
    assert remote.RunPlace.of("gs://b/r").checkpoints_at == "gs://b/r"
    with pytest.raises(remote.RemoteError, match=r"--workdir=hf://b/r: hf:// .* choose one of gs://, s3://"):
        remote.RunPlace.of("hf://b/r")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gcsfs" else real_find_spec(name))
    with pytest.raises(ImportError, match=r'needs the gcsfs package: pip install -e "\.\[gcs\]"'):
        remote.RunPlace.of("gs://b/r")


def test_an_unreachable_storage_service_is_one_line_before_any_retry(monkeypatch, capsys, caplog, tmp_path):
    """Offline, gcsfs would retry each request for minutes and log a traceback each time: one line
    instead, naming the address that took no connection, and nothing from gcsfs's log."""
    from babylm_jax import train

    port = free_port()  # nothing listens there
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://localhost:{port}")
    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path))
    line = user_error(capsys, train, ["train", "--config=configs/base.py", "--workdir=gs://bkt/runs/offline"])
    assert f"--workdir=gs://bkt/runs/offline: cannot reach gs://bkt: localhost:{port} takes no connection" in line
    assert "is this host offline?" in line
    assert not [record for record in caplog.records if record.name.startswith("gcsfs")]


@pytest.mark.slow
def test_training_on_a_remote_workdir_resumes_on_a_fresh_host(bucket, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    """A run stopped at step 10 on one host goes on at another with an empty disk: it finds its
    checkpoint, config, metrics and data in the bucket and ends where an uninterrupted local run ends."""
    from etils import epath

    config = tiny_config(tiny_corpus_dir)
    config.train.num_steps = 20
    reference = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "local"))
    url = f"{bucket}/runs/r1"
    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path / "host1"))
    loop.train_and_evaluate(RunConfig.from_config(config), url, stop_at_step=10)
    assert "a remote workdir holds no lock, so process 0 owns the run" in capsys.readouterr().out
    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path / "host2"))
    resumed = loop.train_and_evaluate(RunConfig.from_config(config), url)
    out = capsys.readouterr().out
    assert f"Resuming {url} from step 10" in out and f"{url}/checkpoints " in out
    assert resumed["final_eval_loss"] == reference["final_eval_loss"] and resumed["words_seen"] == reference["words_seen"]
    local = _metrics((tmp_path / "local" / rundir.METRICS).read_text())
    pushed = _metrics(epath.Path(url, rundir.METRICS).read_text())
    assert sorted(pushed) == list(range(1, 21))  # each step once
    np.testing.assert_array_equal([pushed[s]["loss"] for s in range(1, 21)], [local[s]["loss"] for s in range(1, 21)])
    assert json.loads(epath.Path(url, rundir.SUMMARY).read_text())["steps"] == 20
    assert rundir.checkpoint_steps(url) == {20: f"{url}/checkpoints", 10: f"{url}/checkpoints"}
    for host in ("host1", "host2"):
        assert not (tmp_path / host / "workdirs" / "gs" / "bkt" / "runs" / "r1" / rundir.CHECKPOINTS).exists()
    assert os.path.isfile(tmp_path / "host2" / "workdirs" / "gs" / "bkt" / "runs" / "r1" / rundir.PREPARED)

    # A third host with an empty disk scores and exports the run straight from the bucket.
    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path / "host3"))
    from babylm_jax import evaluate, export

    args = ["--data_dir", str(FIXTURES), "--tasks", "zhoblimp", "--limit", "2", "--config.scoring.batch_size=8",
            "--config.scoring.row_len=32"]
    evaluate.main(["evaluate", "--workdir", url, "--output", str(tmp_path / "remote_eval" / "results.json"), *args])
    evaluate.main(["evaluate", "--workdir", str(tmp_path / "local"), "--output", str(tmp_path / "local_eval" / "results.json"),
                   *args])
    assert "checkpoints read from there" in capsys.readouterr().out
    assert (json.loads((tmp_path / "remote_eval" / "results.json").read_text())
            == json.loads((tmp_path / "local_eval" / "results.json").read_text()))
    out = export.main(["export", "--workdir", url, "--output", str(tmp_path / "hf")])
    assert json.loads((out / "config.json").read_text())["vocab_size"] == config.model.vocab_size
    with pytest.raises(rundir.WorkdirError, match="--output=gs://bkt/hf: a remote path"):
        export.main(["export", "--workdir", url, "--output", "gs://bkt/hf"])


@pytest.mark.slow
def test_prepare_on_a_remote_workdir_pushes_what_it_made(bucket, tmp_path, monkeypatch):
    from etils import epath

    from babylm_jax import prepare

    monkeypatch.setenv("BABYLM_CACHE_DIR", str(tmp_path / "host"))
    configs = pathlib.Path(__file__).parents[1] / "configs"
    url = f"{bucket}/runs/prepared"
    prepare.main(["prepare", f"--config={configs / 'base.py'}", f"--workdir={url}", "--config.data.max_documents=200"])
    listed = remote.Mirror(url, tmp_path / "elsewhere").remote_files()
    assert {rundir.BUDGET, rundir.PREPARED, f"{rundir.TOKENIZER}/fingerprint.txt"} <= set(listed)
    mirror = remote.mirror_folder(url)
    assert epath.Path(url, rundir.BUDGET).read_text() == (mirror / rundir.BUDGET).read_text()
