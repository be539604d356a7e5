"""Golden small runs of the trainer: loss falls, resume is exact, sharding changes nothing."""
import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import tiny_config
from fixtures.fake_gcs import fake_gcs

from babylm_jax.config.schema import RunConfig
from babylm_jax.core import rundir as rundir_lib
from babylm_jax.core.remote import RunPlace
from babylm_jax.corpus import pipeline
from babylm_jax.training import checkpoints, in_run_eval, loop, run, run_config
from babylm_jax.training.state import build_model
from babylm_jax.training.step import make_eval_step, make_masking
from babylm_jax.training.summary import format_outputs


def read_metrics(workdir) -> tuple[dict[int, dict], list[dict]]:
    """(train records by step, eval records) from metrics.jsonl."""
    train, evals = {}, []
    for line in pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "eval_loss" in record:
            evals.append(record)
        else:
            train[record["step"]] = record
    return train, evals


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
@pytest.mark.slow
def test_family_trains_and_loss_falls(family, tiny_corpus_dir, tmp_path):
    config = tiny_config(tiny_corpus_dir, family)
    if family == "causal":
        config.checkpoint.update(word_milestones=True, milestone_unit=500)
    if family == "hybrid":
        config.train.ema_decay = 0.9
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    train, evals = read_metrics(tmp_path)
    first = np.mean([train[s]["loss"] for s in (1, 2, 3)])
    last = np.mean([train[s]["loss"] for s in (28, 29, 30)])
    assert last < (0.65 if family == "causal" else 0.85) * first, (family, first, last)
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    assert summary["tokens_seen"] == 30 * 8 * 32
    assert summary["words_seen"] == pytest.approx(train[30]["words_seen"])
    assert (tmp_path / "learning_curves.png").stat().st_size > 1000

    if family == "causal":  # a milestone checkpoint at the first step whose words reach it
        milestones = sorted(int(p.name) for p in (tmp_path / "milestones").iterdir())
        words = {s: r["words_seen"] for s, r in train.items()}
        expected = [s for s in sorted(words) if int(words[s] // 500) > int(words.get(s - 1, 0) // 500)]
        assert milestones == expected and len(expected) >= 5
        loaded = checkpoints.load_for_eval(str(tmp_path), step=milestones[0])
        assert loaded.step == milestones[0] and loaded.words_seen == pytest.approx(words[milestones[0]])

    if family == "hybrid":  # EMA params differ from the raw ones and are what eval uses
        ema = checkpoints.load_for_eval(str(tmp_path))
        raw = checkpoints.load_for_eval(str(tmp_path), use_ema=False)
        assert ema.used_ema and not raw.used_ema
        diff = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), ema.params, raw.params)
        assert max(jax.tree.leaves(diff)) > 1e-4
        typed = RunConfig.from_config(config)
        data = pipeline.build_train_data(typed, str(tmp_path))
        masking = make_masking(typed.data, data.tokenizer)
        eval_step = jax.jit(make_eval_step(typed, ema.model, masking))
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "fsdp"))
        batches = data.eval_batches[: config.train.eval_batches]
        assert in_run_eval.evaluate_loss(eval_step, ema.params, batches, mesh) == pytest.approx(evals[-1]["eval_loss"], rel=1e-5)
        assert in_run_eval.evaluate_loss(eval_step, raw.params, batches, mesh) != pytest.approx(evals[-1]["eval_loss"], rel=1e-5)


class RecordingIterator:
    """Wraps the grain iterator, keeping every batch it hands out (state calls pass through)."""

    def __init__(self, inner, seen):
        self.inner, self.seen = inner, seen

    def __next__(self):
        batch = next(self.inner)
        self.seen.append(batch["tokens"].copy())
        return batch

    def get_state(self):
        return self.inner.get_state()

    def set_state(self, state):
        self.inner.set_state(state)


@pytest.mark.slow
def test_resume_continues_the_identical_trajectory(tiny_corpus_dir, tmp_path, monkeypatch):
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=8, eval_every_steps=100)
    config.checkpoint.every_steps = 4
    seen: dict[str, list] = {}
    real_build = pipeline.build_train_data

    def recording_build(cfg, workdir, **kwargs):
        data = real_build(cfg, workdir, **kwargs)
        data.train_iterator = RecordingIterator(data.train_iterator, seen.setdefault(str(workdir), []))
        return data

    monkeypatch.setattr(run, "build_train_data", recording_build)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    loop.train_and_evaluate(RunConfig.from_config(config), str(straight))
    loop.train_and_evaluate(RunConfig.from_config(config), str(resumed), stop_at_step=4)
    assert sorted(int(p.name) for p in (resumed / "checkpoints").iterdir()) == [4]
    loop.train_and_evaluate(RunConfig.from_config(config), str(resumed))  # picks up at step 4
    again = loop.train_and_evaluate(RunConfig.from_config(config), str(resumed))  # a finished run trains nothing more
    assert again["steps"] == 8 and len(read_metrics(resumed)[0]) == 8

    a, b = read_metrics(straight)[0], read_metrics(resumed)[0]
    assert [a[s]["loss"] for s in range(1, 9)] == [b[s]["loss"] for s in range(1, 9)]
    batches_a, batches_b = seen[str(straight)], seen[str(resumed)]
    assert len(batches_a) == len(batches_b) == 8
    for x, y in zip(batches_a, batches_b):
        np.testing.assert_array_equal(x, y)


def _three_steps_on(tiny_corpus_dir, workdir, **mesh) -> dict[int, dict]:
    """The train records of 3 steps of the tiny config on the mesh `mesh` says."""
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=3, eval_every_steps=100)
    config.mesh.update(**mesh)
    loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    return read_metrics(workdir)[0]


def _losses_on(tiny_corpus_dir, workdir, **mesh) -> list[float]:
    train = _three_steps_on(tiny_corpus_dir, workdir, **mesh)
    return [train[s]["loss"] for s in (1, 2, 3)]


@pytest.fixture(scope="module")
def one_device_steps(tiny_corpus_dir, tmp_path_factory) -> dict[int, dict]:
    """3 steps of the tiny config on one device: the reference both sharding tests compare with."""
    return _three_steps_on(tiny_corpus_dir, tmp_path_factory.mktemp("one_device"), num_devices=1)


@pytest.mark.slow
def test_data_parallel_and_fsdp_on_8_devices_match_one_device(one_device_steps, tiny_corpus_dir, tmp_path):
    assert jax.device_count() == 8
    single = [one_device_steps[s]["loss"] for s in (1, 2, 3)]
    dp = _losses_on(tiny_corpus_dir, tmp_path / "dp", num_devices=8)
    fsdp = _losses_on(tiny_corpus_dir, tmp_path / "fsdp", num_devices=8, fsdp=4)
    np.testing.assert_allclose(dp, single, rtol=2e-5)
    np.testing.assert_allclose(fsdp, single, rtol=2e-5)


def test_fsdp_shards_parameters(tiny_corpus_dir):
    from babylm_jax.training import sharding
    from babylm_jax.training.optimizer import make_train_optimizer
    from babylm_jax.training.state import boxed_init_fn

    config = tiny_config(tiny_corpus_dir)
    config.mesh.update(num_devices=8, fsdp=4)
    config = RunConfig.from_config(config)
    model = build_model(config.model)
    init = boxed_init_fn(config, model, make_train_optimizer(config.train))
    mesh = sharding.make_mesh(config.mesh)
    shardings = sharding.state_shardings(jax.eval_shape(init, jax.random.key(0)), mesh)
    spec = shardings.params["params"]["layers_0"]["mlp"]["gate_up"]["kernel"].spec
    assert spec[0] == "fsdp"  # the "embed" axis of the MLP kernel is split over fsdp


@pytest.mark.slow
def test_two_processes_match_one_process(one_device_steps, tiny_corpus_dir, tmp_path):
    """Two JAX processes train as one process on one device does: on a shared local workdir, and on a
    remote (fake gs://) workdir where each process has a host folder of its own and process 1 cannot
    read the corpus (it opens what process 0 prepared, pulled from the bucket, checked by hash)."""
    script = pathlib.Path(__file__).with_name("multiprocess_train.py")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    port = str(20000 + os.getpid() % 20000)

    def launch(workdir, num_processes, process_id, **extra_env):
        args = [sys.executable, str(script), str(tiny_corpus_dir), str(workdir), str(num_processes), str(process_id), port]
        return subprocess.Popen(args, env={**env, **extra_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish(procs):
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        for p, out in zip(procs, outputs):
            assert p.returncode == 0, out[-3000:]
        return outputs

    finish([launch(tmp_path / "two", 2, i) for i in range(2)])
    with fake_gcs("pod") as gcs_env:
        hosts = [tmp_path / f"host{i}" for i in range(2)]
        remote_outputs = finish([launch("gs://pod/run", 2, i, **gcs_env, BABYLM_CACHE_DIR=str(hosts[i]),
                                        BABYLM_TEST_NO_SOURCES="1") for i in range(2)])
        assert rundir_lib.checkpoint_steps("gs://pod/run") == {3: "gs://pod/run/checkpoints"}
    mirrors = [host / "workdirs" / "gs" / "pod" / "run" for host in hosts]
    assert "a remote workdir holds no lock, so process 0 owns the run" in remote_outputs[0]
    assert not any("credentials" in out for out in remote_outputs)  # no client looked beyond the fake
    assert (mirrors[1] / "data" / "prepared.json").is_file() and not (mirrors[1] / "metrics.jsonl").exists()
    assert not any((m / "checkpoints").exists() for m in mirrors)  # checkpoints live in the bucket only
    one = one_device_steps
    for two in (read_metrics(tmp_path / "two")[0], read_metrics(mirrors[0])[0]):
        np.testing.assert_allclose([two[s]["loss"] for s in (1, 2, 3)], [one[s]["loss"] for s in (1, 2, 3)], rtol=2e-5)
        assert [two[s]["words_seen"] for s in (1, 2, 3)] == [one[s]["words_seen"] for s in (1, 2, 3)]  # exactly


def test_config_errors_name_the_key(tiny_corpus_dir, tmp_path):
    config = tiny_config(tiny_corpus_dir)
    config.train.seq_len = 128
    with pytest.raises(ValueError, match="train.seq_len=128 exceeds model.max_len=64"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "a"))
    config = tiny_config(tiny_corpus_dir)
    with config.unlocked():
        config.model.num_layer = 3
    with pytest.raises(ValueError, match="model.num_layer"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "b"))
    config = tiny_config(tiny_corpus_dir)
    config.data.corpus = str(tmp_path / "no_such_dir")
    with pytest.raises(ValueError, match="no_such_dir"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "c"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("\n\n", encoding="utf-8")
    config.data.corpus = str(empty)
    with pytest.raises(ValueError, match=r"a\.txt.*empty"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "d"))


@pytest.mark.slow
def test_incompatible_workdir_is_refused_and_untouched(tiny_corpus_dir, tmp_path):
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=2, eval_every_steps=100)
    loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    config.model.d_model = 64
    with pytest.raises(ValueError, match="model.d_model=32"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_unknown_override_on_the_command_line_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "babylm_jax.train", "--config", "configs/base.py", "--workdir", str(tmp_path),
         "--config.train.num_stepz=3"],
        cwd=pathlib.Path(__file__).parents[1], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "num_stepz" in result.stderr
    assert not any(tmp_path.iterdir())


def test_a_workdir_without_checkpoints_takes_the_new_config(tiny_corpus_dir, tmp_path):
    """A run that failed before its first checkpoint (say, a wrong corpus path) can be fixed and rerun."""
    config = tiny_config(tiny_corpus_dir)
    run_config.write_run_config(str(tmp_path), RunConfig.from_config(config))
    config.model.d_model = 64
    run_config.check_config(str(tmp_path), RunConfig.from_config(config))
    run_config.write_run_config(str(tmp_path), RunConfig.from_config(config))
    assert run_config.load_run_config(str(tmp_path)).model.d_model == 64


def test_the_end_of_a_run_says_where_its_outputs_are(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    text = format_outputs(RunPlace.of(tmp_path))
    assert f"{tmp_path / 'checkpoints'}    checkpoints (params" in text and f"{tmp_path / 'metrics.jsonl'}  training" in text
    assert "milestones" not in text and "summary.json" not in text  # only what exists
    assert f"python -m babylm_jax.export --workdir {tmp_path} --output {tmp_path / 'hf'}" in text


def test_the_next_commands_paste_as_printed_for_a_workdir_with_spaces(tmp_path):
    import shlex

    workdir = tmp_path / "my runs" / "base 1"
    workdir.mkdir(parents=True)
    commands = format_outputs(RunPlace.of(workdir)).split("Next\n")[1].splitlines()
    assert [shlex.split(line)[3:] for line in commands] == [
        ["--workdir", str(workdir), "--data_dir", "DATA_DIR"],
        ["--workdir", str(workdir), "--output", str(workdir / "hf")]]


def test_a_corpus_whose_held_out_share_gets_no_document_says_so_and_reports_no_eval_loss(tmp_path, capsys):
    """One document, nothing held out: the run reported eval_loss 0.0000 and final_eval_loss 0.0, first in any
    comparison. It says so at the start, with a way on, and the eval loss is absent."""
    from fixtures.data import synthetic

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "one.txt").write_text("\n".join(synthetic.documents(150)) + "\n", encoding="utf-8")
    config = tiny_config(tmp_path / "corpus")
    config.train.update(num_steps=2, eval_every_steps=1)
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "run"))
    out = capsys.readouterr().out
    assert ("no held-out text (the corpus is 1 document, too few for data.eval_share): the eval loss is not measured, "
            "and is absent from metrics.jsonl and summary.json; to measure it, give the corpus more documents") in out
    assert "final eval loss   none: no held-out text" in out
    assert summary["final_eval_loss"] is None
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_eval_loss"] is None
    assert read_metrics(tmp_path / "run")[1] == []
