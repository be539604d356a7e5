"""TensorBoard and W&B writers: the same scalars as metrics.jsonl, resumed without repeats."""
import importlib.util
import json
import pathlib
import shutil
import socket
import time

import pytest
from conftest import tiny_config
from fixtures import wandb_log
from fixtures.cli import user_error

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import TrainConfig, WandbConfig
from babylm_jax import evaluate, train
from babylm_jax.core import rundir, writers
from babylm_jax.training import loop

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed (pip install -e '.[tensorboard]')")
pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install -e '.[wandb]')")
SAMPLE_PROMPTS = TrainConfig().sample_prompts  # the default prompts (tiny_config turns them off)


def jsonl_scalars(workdir: pathlib.Path) -> dict[tuple[str, int], float]:
    """(name, step) -> value of every number metrics.jsonl holds."""
    found = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for name, value in writers.scalars_of(record).items():
            found[(name, record["step"])] = value
    return found


def tensorboard_scalars(logdir: pathlib.Path) -> dict[tuple[str, int], list[float]]:
    """(tag, step) -> every value TensorBoard's own reader finds there."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    found = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            found.setdefault((tag, event.step), []).append(event.value)
    return found


def wandb_scalars(workdir: pathlib.Path) -> tuple[dict[tuple[str, int], list[float]], set[str]]:
    """(key, step) -> every value the offline W&B run files hold, and the run ids of those files."""
    found, ids = {}, set()
    for path in sorted(workdir.glob("wandb/offline-run-*/run-*.wandb")):
        ids.add(path.stem[len("run-"):])
        for row in wandb_log.settled_history([path]):
            for key, value in row.items():
                if not key.startswith("_"):
                    found.setdefault((key, row["_step"]), []).append(value)
    return found, ids


@pytest.mark.slow
def test_tensorboard_and_wandb_hold_what_metrics_jsonl_holds_after_a_resume(tiny_corpus_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = tiny_config(tiny_corpus_dir)
    config.train.writers = ("jsonl", "tensorboard", "wandb")
    config.train.wandb.mode = "offline"
    loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    # A run killed after logging step 30 but before its checkpoint: resume from step 20 re-trains 21..30.
    shutil.rmtree(tmp_path / "checkpoints" / "30")
    (tmp_path / "summary.json").unlink()
    loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))

    expected = jsonl_scalars(tmp_path)
    assert ("loss", 30) in expected and ("eval_loss", 30) in expected and ("tokens_per_s", 1) in expected
    # TensorBoard's events after step 20 were rewritten by the resumed run, as metrics.jsonl's records;
    # W&B keeps what it received first: the same losses (resume is exact), the first run's timings.
    timing = {"tokens_per_s", "mfu"}
    for found, same in ((tensorboard_scalars(tmp_path / "tensorboard"), lambda key: True),
                        (wandb_scalars(tmp_path)[0], lambda key: key[0] not in timing or key[1] <= 20)):
        assert set(found) == set(expected)
        assert all(len(values) == 1 for values in found.values()), "a step was written twice"
        compared = {key for key in expected if same(key)}
        assert {k: found[k][0] for k in compared} == pytest.approx({k: expected[k] for k in compared}, rel=1e-6)
    assert len(wandb_scalars(tmp_path)[1]) == 1, "the resumed run must continue the same W&B run id"
    state = json.loads((tmp_path / rundir.WANDB_RUN).read_text())
    assert state["step"] == 30


@pytest.mark.slow
def test_config_and_summary_reach_the_writers(tiny_corpus_dir, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_SILENT", "true")
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=10, writers=("tensorboard", "wandb"), sample_prompts=SAMPLE_PROMPTS)
    config.train.wandb.mode = "offline"
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    texts = {tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
             for tag in ("config", "summary", "budget")}
    assert '"num_steps": 10' in texts["config"] and '"steps": 10' in texts["summary"]
    assert json.loads((tmp_path / "budget.json").read_text()) == json.loads(texts["budget"].strip("`\n"))
    hparams = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    assert b"train.num_steps" in hparams and b"model.d_model" in hparams

    (path,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_log.settled_records(path)
    run_config = next(r.run.config for r in records if r.WhichOneof("record_type") == "run")
    keys = {item.key: json.loads(item.value_json) for item in run_config.update}
    assert keys["train.num_steps"] == 10 and keys["model.family"] == "causal"
    summaries = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                 for r in records if r.WhichOneof("record_type") == "summary" for item in r.summary.update}
    assert summaries["summary.steps"] == 10
    logged = {item.key or "/".join(item.nested_key) for r in records if r.WhichOneof("record_type") == "history"
              for item in r.history.item}
    assert "samples/_type" in logged, sorted(logged)  # the eval's text samples, as a W&B table
    assert summaries["summary.final_eval_loss"] == pytest.approx(summary["final_eval_loss"])


def test_unknown_writer_and_missing_package_are_one_line(capsys, tmp_path, monkeypatch):
    argv = ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}"]
    line = user_error(capsys, train, [*argv, "--config.train.writers=('jsonl', 'mlflow')"])
    assert "train.writers=('jsonl', 'mlflow'): must name writers of ('jsonl', 'tensorboard', 'wandb')" in line
    line = user_error(capsys, train, [*argv, "--config.train.writers=('wandb',)", "--config.train.wandb.mode=on"])
    assert "train.wandb.mode='on': must be one of ('online', 'offline', 'disabled')" in line

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real_find_spec(name, *a))
    line = user_error(capsys, train, [*argv, "--config.train.writers=('jsonl', 'wandb')"])
    assert "needs the wandb package" in line and 'pip install -e ".[wandb]"' in line
    assert not (tmp_path / "run").exists()


def test_online_wandb_without_an_api_key_is_one_line_before_the_data(capsys, tmp_path, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # W&B's other places for a key: none there
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    argv = ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", "--config.train.writers=('wandb',)",
            "--config.data.max_documents=50"]
    line = user_error(capsys, train, argv)
    assert "train.wandb.mode='online' needs a W&B API key" in line and "--config.train.wandb.mode=offline" in line
    assert not (tmp_path / "run").exists()


def test_online_wandb_with_no_server_to_reach_is_one_line_before_the_data(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    with socket.socket() as closed:  # a port nothing listens on: the connection is refused at once
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    argv = ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", "--config.train.writers=('wandb',)",
            "--config.data.max_documents=50"]
    line = user_error(capsys, train, argv)
    assert f"train.wandb.mode='online': the W&B server at {url} did not answer as W&B does" in line
    assert "--config.train.wandb.mode=offline" in line
    assert not (tmp_path / "run").exists()


def test_a_server_that_never_answers_is_said_after_the_timeout(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.perf_counter()
        problem = writers.wandb_server_problem(url, 0.5)
        assert time.perf_counter() - started < 5
    assert problem == "did not answer within 0.5 s" or problem.startswith("did not answer as W&B does (")


@pytest.mark.parametrize("value", ["", "Offline"])
def test_a_wandb_mode_environment_variable_wandb_does_not_take_is_named(capsys, tmp_path, monkeypatch, value):
    monkeypatch.setenv("WANDB_MODE", value)
    argv = ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", "--config.train.writers=('wandb',)",
            "--config.train.wandb.mode=offline", "--config.data.max_documents=50"]
    line = user_error(capsys, train, argv)
    assert line.startswith(f"train: error: environment variable WANDB_MODE={value!r} is not a W&B mode")
    assert not (tmp_path / "run").exists()


def test_wandb_dir_holds_the_w_and_b_files_of_a_resumed_run(tmp_path, monkeypatch):
    """WANDB_DIR set: W&B's own files go there, not into the workdir; the run id in the workdir's
    wandb_run.json still makes a second writer continue the same run."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").mkdir()
    settings = WandbConfig(project="p", entity="", name="", group="", tags=(), mode="offline")
    for steps in ((1, 2), (3,)):
        time.sleep(1.0)  # W&B names an offline run's folder by the second it starts: one folder each
        writer = writers.WandbWriter(str(tmp_path / "run"), settings, {"train": {"num_steps": 3}})
        for step in steps:
            writer.scalars(step, {"loss": float(step)})
        writer.close()
    assert not (tmp_path / "run" / rundir.WANDB).exists()
    found, ids = wandb_scalars(tmp_path / "elsewhere")
    assert len(ids) == 1 and found == {("loss", s): [float(s)] for s in (1, 2, 3)}
    assert json.loads((tmp_path / "run" / rundir.WANDB_RUN).read_text())["step"] == 3


def test_trimmed_events_keep_earlier_steps_only(tmp_path):
    writer = writers.TensorBoardWriter(str(tmp_path), 0, {"train": {"num_steps": 5}})
    for step in range(1, 6):
        writer.scalars(step, {"loss": float(step)})
    writer.close()
    writers.trim_events(str(tmp_path), 3)
    assert tensorboard_scalars(tmp_path) == {("loss", s): [float(s)] for s in (1, 2, 3)}


@pytest.mark.slow
def test_evaluate_logs_results_fine_tuning_epochs_and_milestones_to_the_run(tiny_corpus_dir, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_SILENT", "true")
    fixtures = pathlib.Path(__file__).parent / "fixtures"
    data = tmp_path / "data"
    shutil.copytree(fixtures / "minimal_pairs" / "zhoblimp", data / "zhoblimp")
    shutil.copytree(fixtures / "clue" / "afqmc", data / "afqmc")
    run = tmp_path / "run"
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=10, writers=("tensorboard", "wandb"))
    config.train.wandb.mode = "offline"
    config.checkpoint.update(word_milestones=True, milestone_unit=600)
    loop.train_and_evaluate(RunConfig.from_config(config), str(run))
    common = [f"--workdir={run}", f"--data_dir={data}", "--config.log_to_run=True", "--config.scoring.batch_size=8"]
    evaluate.main(["evaluate", *common, "--tasks=zhoblimp,afqmc", "--limit=8", "--config.finetune.epochs=2",
                   "--config.finetune.max_len=64", "--config.finetune.batch_size=8"])
    evaluate.main(["evaluate", *common, "--tasks=zhoblimp", "--milestones=all", f"--output={tmp_path / 'm' / 'r.json'}"])

    details = json.loads((run / "eval" / "results_details.json").read_text())["tasks"]
    milestones = json.loads((tmp_path / "m" / "milestone_curves.json").read_text())
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    zhoblimp = json.loads((run / "eval" / "results.json").read_text())["zhoblimp"]["accuracy"]
    assert scalars["eval/zhoblimp"][10] == pytest.approx(zhoblimp)
    assert list(scalars["finetune/afqmc/step_10/dev_accuracy"].values()) == pytest.approx(
        details["afqmc"]["dev_accuracy_per_epoch"])
    rows = milestones
    assert len(rows) >= 2
    assert {int(r["words_seen"]): r["zhoblimp"] for r in rows} == pytest.approx(scalars["milestone/zhoblimp"])

    logged = wandb_log.settled_history(sorted(run.glob("wandb/offline-run-*/run-*.wandb")))
    assert [r["eval/zhoblimp"] for r in logged if "eval/zhoblimp" in r][0] == pytest.approx(zhoblimp)
    assert [r["milestone/zhoblimp"] for r in logged if "milestone/zhoblimp" in r] == pytest.approx(
        [r["zhoblimp"] for r in rows])
    assert len({p.stem for p in run.glob("wandb/offline-run-*/run-*.wandb")}) == 1


def test_log_to_run_without_writers_is_refused_before_loading(capsys, tmp_path):
    from fixtures.run import make_run

    make_run(tmp_path / "run")
    shutil.copytree(pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs" / "zhoblimp", tmp_path / "d" / "zhoblimp")
    line = user_error(capsys, evaluate, ["evaluate", f"--workdir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'd'}",
                                         "--config.log_to_run=True"])
    assert "train.writers=('jsonl',)" in line and "no TensorBoard folder or W&B run" in line
    assert not (tmp_path / "run" / "eval").exists()


@pytest.mark.parametrize("value, ours", [("disabled", "disabled"), ("dryrun", "offline")])
def test_a_wandb_mode_environment_variable_the_config_overrides_is_named(capsys, tmp_path, monkeypatch, value, ours):
    """wandb.init(mode=train.wandb.mode) ignores WANDB_MODE: WANDB_MODE=disabled with the default online mode
    went online, or failed on a missing API key without a word of WANDB_MODE."""
    monkeypatch.setenv("WANDB_MODE", value)
    argv = ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", "--config.train.writers=('wandb',)",
            "--config.data.max_documents=50"]
    line = user_error(capsys, train, argv)
    assert line == (f"train: error: environment variable WANDB_MODE={value!r} differs from config key train.wandb.mode="
                    f"'online', which chooses the mode (W&B would not use WANDB_MODE): unset it, or set "
                    f"--config.train.wandb.mode={ours}")
    assert not (tmp_path / "run").exists()
