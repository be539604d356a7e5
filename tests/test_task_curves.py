"""Task curves: a paradigm-balanced sample scored at every eval and word milestone, logged and drawn."""
import json

import matplotlib.image
import pytest
from conftest import tiny_config
from fixtures.data import synthetic

from babylm_jax.config.schema import RunConfig
from babylm_jax import evaluate
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.training import checkpoints, in_run_eval, loop


def _pair(uid: str, i: int) -> minimal_pairs.Pair:
    return minimal_pairs.Pair(f"good{i}", f"bad{i}", uid, "phenomenon")


def test_sample_takes_the_same_number_from_every_uid_evenly_spaced():
    pairs = [_pair("a", i) for i in range(10)] + [_pair("b", i) for i in range(5)] + [_pair("c", i) for i in range(2)]
    sample = in_run_eval.sample_by_uid(pairs, items=9)
    assert [p.uid for p in sample] == ["a"] * 3 + ["b"] * 3 + ["c"] * 2
    assert [p.good for p in sample if p.uid == "a"] == ["good0", "good4", "good9"]  # spread, not the first three
    assert [p.good for p in sample if p.uid == "b"] == ["good0", "good2", "good4"]


def _write_zhoblimp(root, paradigms: int = 3, per_paradigm: int = 8) -> None:
    """A ZhoBLiMP-format folder of our own: good = a subject-verb-object sentence, bad = the object first."""
    folder = root / "zhoblimp" / "ZhoBLiMP"
    folder.mkdir(parents=True)
    for p in range(paradigms):
        rows = []
        for i in range(per_paradigm):
            s, v, o = (words[(p + i) % len(words)] for words in (synthetic.SUBJECTS, synthetic.VERBS, synthetic.OBJECTS))
            rows.append({"sentence_good": f"{s}{v}{o}。", "sentence_bad": f"{o}{s}{v}。", "UID": f"paradigm_{p}",
                         "phenomenon": "word_order"})
        (folder / f"paradigm_{p}.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                                                     encoding="utf-8")


@pytest.mark.slow
def test_training_logs_task_scores_at_evals_and_milestones(tiny_corpus_dir, tmp_path):
    _write_zhoblimp(tmp_path / "data")
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=20, eval_every_steps=10, eval_tasks="zhoblimp", eval_task_items=12,
                        eval_data_dir=str(tmp_path / "data"))
    config.checkpoint.update(word_milestones=True, milestone_unit=1000)
    workdir = tmp_path / "run"
    summary = loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    scored = [r for r in records if "task/zhoblimp" in r]
    assert [r["step"] for r in scored if r["task_at"] == "eval"] == [10, 20]
    milestone_steps = sorted(int(p.name) for p in (workdir / "milestones").iterdir())
    assert [r["step"] for r in scored if r["task_at"] == "milestone"] == milestone_steps and milestone_steps
    assert all(0.0 <= r["task/zhoblimp"] <= 1.0 and r["words_seen"] > 0 for r in scored)

    # The logged score is the score of the checkpoint's parameters on the same sample.
    loaded = checkpoints.load_for_eval(str(workdir))
    curves = in_run_eval.TaskCurves.from_config(loaded.config.train, loaded.tokenizer, loaded.model, loaded.params)
    assert len(curves.samples["zhoblimp"].pairs) == 12  # 4 of each paradigm's 8
    assert curves.score(loaded.params) == pytest.approx({"zhoblimp": scored[-1]["task/zhoblimp"]})
    assert summary["final_task_scores"] == {"zhoblimp": scored[-1]["task/zhoblimp"]}
    assert matplotlib.image.imread(workdir / "learning_curves.png").shape[1] > 1000  # loss and task panels

    # evaluate --milestones: every milestone checkpoint and the last, one results folder each, one curve.
    output = tmp_path / "eval" / "results.json"
    evaluate.main(["evaluate", "--workdir", str(workdir), "--data_dir", str(tmp_path / "data"), "--tasks", "zhoblimp",
                   "--milestones", "all", "--output", str(output)])
    rows = json.loads((output.parent / "milestone_curves.json").read_text())
    assert [r["step"] for r in rows] == sorted(set(milestone_steps) | {20})
    for row in rows:
        per_step = json.loads((output.parent / f"step_{row['step']}" / "results.json").read_text())
        assert row["zhoblimp"] == per_step["zhoblimp"]["accuracy"]
    assert rows[-1]["words_seen"] == pytest.approx(summary["words_seen"])
    assert (output.parent / "milestone_curves.png").stat().st_size > 1000


def test_eval_tasks_must_be_minimal_pair_tasks(tiny_corpus_dir):
    config = tiny_config(tiny_corpus_dir)
    config.train.eval_tasks = "zhoblimp,afqmc"
    with pytest.raises(ValueError, match="train.eval_tasks: 'afqmc'"):
        in_run_eval.TaskCurves.from_config(RunConfig.from_config(config).train, None, None, None)


@pytest.mark.parametrize("by_env", [True, False])
def test_a_task_data_directory_without_the_tasks_is_named_with_its_source_before_any_work(
        tiny_corpus_dir, tmp_path, monkeypatch, by_env):
    """BABYLM_DATA_DIR (or train.eval_data_dir) pointing nowhere failed after the data was prepared, as
    "task zhoblimp: directory .../zhoblimp does not exist" alone, naming neither where the path came from nor a way on."""
    config = tiny_config(tiny_corpus_dir)
    config.train.eval_tasks = "zhoblimp"
    monkeypatch.setenv("BABYLM_DATA_DIR", str(tmp_path / "nowhere"))
    if not by_env:
        config.train.eval_data_dir = str(tmp_path / "nowhere")
    source = "environment variable BABYLM_DATA_DIR" if by_env else "config key train.eval_data_dir"
    with pytest.raises(FileNotFoundError, match=rf"zhoblimp does not exist \({source}='.*nowhere'\); point it at the "
                                                r"task data, or train without task curves: --config.train.eval_tasks=''"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
