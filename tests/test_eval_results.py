"""Task registry selection, the results files, and the evaluate CLI end to end."""
import json
import pathlib
import shutil

import pytest

from babylm_jax.config.schema import RunConfig
from babylm_jax import evaluate
from babylm_jax.core.families import Scoring
from babylm_jax.eval.zero_shot import minimal_pairs, scoring
from babylm_jax.eval import results
from babylm_jax.tasks import registry as tasks
from babylm_jax.training.checkpoints import load_for_eval

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"
OFFICIAL_LAYOUT = pathlib.Path(__file__).parent / "fixtures" / "official_layout"
CLUE = pathlib.Path(__file__).parent / "fixtures" / "clue"


def test_select_tasks_all_skips_absent_tasks_with_reasons():
    specs, skipped = tasks.select_tasks("all", FIXTURES)
    assert [s.name for s in specs] == ["zhoblimp", "xcomps_zh", "hanzi_structure", "hanzi_pinyin"]
    assert "hanzi_pinyin_hidden" in skipped and "does not exist" in skipped["hanzi_pinyin_hidden"]
    assert set(skipped) | {s.name for s in specs} == set(tasks.TASKS)


def test_unknown_or_missing_task_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown task 'zhoblimpp'; known tasks: zhoblimp, xcomps_zh"):
        tasks.select_tasks("zhoblimp,zhoblimpp", FIXTURES)
    with pytest.raises(FileNotFoundError, match="hanzi_pinyin_hidden"):
        tasks.select_tasks("hanzi_pinyin_hidden", FIXTURES)
    with pytest.raises(ValueError, match="--limit=0: must be a positive number"):
        evaluate.main(["evaluate", "--workdir=w", f"--data_dir={FIXTURES}", "--limit=0"])


def _result(accuracy: float, figure_writer=None) -> results.TaskResult:
    figures = {"per_phenomenon": results.phenomenon_figure("t", {"BA": accuracy, "classifier": 0.5})}
    if figure_writer:
        figures["broken"] = figure_writer
    return results.TaskResult({"accuracy": accuracy}, {"accuracy_strict": accuracy - 0.1, "num_items": 600,
                                                       "per_phenomenon": {"BA": accuracy}, "seconds": 12.3}, figures)


def test_write_results_official_shape_details_report_png(tmp_path):
    output = tmp_path / "eval" / "results.json"
    written = results.write_results(output, {"zhoblimp": _result(0.75)}, {"checkpoint_step": 3},
                                    {"hanzi_pinyin": "missing"})
    assert json.loads(output.read_text()) == {"zhoblimp": {"accuracy": 0.75}}
    details = json.loads((tmp_path / "eval" / "results_details.json").read_text())
    assert details["tasks"]["zhoblimp"]["accuracy_strict"] == pytest.approx(0.65)
    assert details["metadata"] == {"checkpoint_step": 3} and details["skipped"] == {"hanzi_pinyin": "missing"}
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "| zhoblimp | accuracy | 0.7500 | 0.6500 | 600 | 12 s |" in report and "hanzi_pinyin: missing" in report
    assert written["zhoblimp_per_phenomenon"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == [
        "report.md", "results.json", "results_details.json", "zhoblimp_per_phenomenon.png"]


def test_a_failing_figure_leaves_no_results_file(tmp_path):
    def broken(path):
        path.write_bytes(b"partial")
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError):
        results.write_results(tmp_path / "results.json", {"zhoblimp": _result(0.5, broken)}, {})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "results.json" not in names and not any("broken" in n for n in names)


@pytest.mark.slow
def test_cli_end_to_end_on_a_trained_checkpoint(tmp_path, capsys):
    import configs.base
    from babylm_jax.training import loop

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "text.txt").write_text("今天天气很好，我们去公园散步。\n\n孩子们在河边唱歌跳舞。\n\n" * 20, encoding="utf-8")
    config = configs.base.get_config()
    config.data.corpus = str(corpus)
    config.data.tokenizer.kind = "char"
    config.data.eval_share = 0.0
    config.model.update(vocab_size=300, d_model=32, num_layers=1, num_heads=2, d_ff=64, max_len=64)
    config.train.update(num_steps=2, batch_size=8, seq_len=32, warmup_steps=1, log_every_steps=1,
                        eval_every_steps=100)
    config.checkpoint.every_steps = 2
    config.checkpoint.word_milestones = False
    config.train.eval_tasks = ""
    workdir = tmp_path / "run"
    loop.train_and_evaluate(RunConfig.from_config(config), str(workdir))

    output = tmp_path / "out" / "results.json"
    evaluate.main(["evaluate", "--workdir", str(workdir), "--data_dir", str(FIXTURES), "--tasks", "all",
                   "--output", str(output), "--limit", "2", "--config.scoring.batch_size=8",
                   "--config.scoring.row_len=32"])
    captured = capsys.readouterr()
    printed = captured.out
    assert "skipped hanzi_structure_hidden" in printed and "| zhoblimp | accuracy |" in printed
    assert "zhoblimp: scoring 4 sentences" in captured.err  # the scoring progress bar
    official = json.loads(output.read_text())
    assert set(official) == {"zhoblimp", "xcomps_zh", "hanzi_structure", "hanzi_pinyin"}
    # Each task's number is what the checkpoint scores on the first 2 pairs of its files.
    loaded = load_for_eval(str(workdir))
    scorer = scoring.SentenceScorer(loaded.model, loaded.params, Scoring.CAUSAL, loaded.tokenizer.mask_id)
    for name, values in official.items():
        spec = tasks.get_task(name)
        pairs = minimal_pairs.read_pairs(spec.find_files(FIXTURES), spec.pair_format, limit=2)
        expected = minimal_pairs.evaluate_pairs(scorer, loaded.tokenizer, pairs, spec.unk_is_wrong)
        assert values["accuracy"] == pytest.approx(expected["accuracy"]), name
    details = json.loads(output.with_name("results_details.json").read_text())
    assert details["metadata"]["config_overrides"] == {"scoring.batch_size": 8, "scoring.row_len": 32}
    assert details["metadata"]["checkpoint_step"] == 2 and details["metadata"]["scoring"] == "causal"
    assert details["tasks"]["zhoblimp"]["num_items"] == 2
    evaluate_official_layout_with_a_config_yaml(workdir, tmp_path, capsys, output)


def evaluate_official_layout_with_a_config_yaml(workdir, tmp_path, capsys, first_output):
    """The same checkpoint on the official evaluation_data/ layout, fine-tuned by a participant's config.yaml."""
    import yaml

    from babylm_jax.config import finetune_protocols as protocols

    submitted = tmp_path / "submitted.yaml"
    submitted.write_text("finetune_hparams:\n  lr: 1.0e-4\n  batch_size: 4\n  max_epochs: 2\n  sequence_length: 32\n"
                         "  task_overrides:\n    tnews: {max_epochs: 1}\n", encoding="utf-8")
    output = tmp_path / "official" / "results.json"
    evaluate.main(["evaluate", "--workdir", str(workdir), "--data_dir", str(OFFICIAL_LAYOUT), "--tasks", "zhoblimp,tnews",
                   "--output", str(output), "--limit", "2", f"--config.finetune.protocol={submitted}",
                   "--config.finetune.eval_rows=8", "--config.finetune.progress=False"])
    printed = capsys.readouterr().out
    assert "data: official pipeline layout (full_eval/ under" in printed
    assert set(json.loads(output.read_text())) == {"zhoblimp", "tnews"}
    details = json.loads(output.with_name("results_details.json").read_text())
    used = {"lr": 1e-4, "batch_size": 4, "max_epochs": 1, "sequence_length": 32, "seed": 42, "train_examples": 0}
    assert details["metadata"]["finetune_settings"] == {"tnews": used}
    assert details["metadata"]["finetune_protocol"] == str(submitted) and details["metadata"]["data_layout"] == "official"
    assert len(details["tasks"]["tnews"]["dev_accuracy_per_epoch"]) == 1  # the override's one epoch
    assert "## finetune_settings" in output.with_name("report.md").read_text()
    written = yaml.safe_load(output.with_name("config.yaml").read_text())
    assert written["models"][0]["backend"] == "causal"
    assert protocols.read_config(output.with_name("config.yaml")) == protocols.read_config(submitted)

    evaluate.main(["evaluate", "--gather", str(first_output.parent), str(output), "--output", str(tmp_path / "cmp")])
    gathered = (tmp_path / "cmp" / "gather.csv").read_text().splitlines()
    assert gathered[0].startswith("run,zhoblimp,") and len(gathered) == 3


def test_all_skips_diagnostic_nli_without_ocnli_train_and_says_why(tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(CLUE / "diagnostic_nli", data_dir / "diagnostic_nli")
    specs, skipped = tasks.select_tasks("all", data_dir)
    assert specs == []
    assert skipped["diagnostic_nli"] == (f"task diagnostic_nli: trains on ocnli's train split, and "
                                         f"{data_dir / 'ocnli' / 'train.json'} does not exist")
    with pytest.raises(FileNotFoundError, match="trains on ocnli's train split"):
        tasks.select_tasks("diagnostic_nli", data_dir)
    shutil.copytree(CLUE / "ocnli", data_dir / "ocnli")
    assert [s.name for s in tasks.select_tasks("all", data_dir)[0]] == ["ocnli", "diagnostic_nli"]


def test_a_task_added_as_one_registry_entry_is_found_scored_and_reported(tmp_path, monkeypatch, capsys):
    from fixtures.run import make_run

    monkeypatch.setitem(tasks.TASKS, "fixture_pairs", tasks.TaskSpec(
        "fixture_pairs", "zero_shot", "accuracy", tasks.TaskRunner.MINIMAL_PAIRS, ("*.jsonl",), pair_format="zhoblimp"))
    data_dir = tmp_path / "data" / "fixture_pairs"
    data_dir.mkdir(parents=True)
    rows = [{"sentence_good": good, "sentence_bad": bad, "UID": "order", "phenomenon": "word_order"}
            for good, bad in (("我们去公园", "公园去我们"), ("他把杯子打碎了", "他杯子把打碎了"))]
    (data_dir / "order.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    make_run(tmp_path / "run")
    output = tmp_path / "eval" / "results.json"
    evaluate.main(["evaluate", f"--workdir={tmp_path / 'run'}", f"--data_dir={data_dir.parent}", "--tasks=all",
                   f"--output={output}", "--config.scoring.batch_size=8"])
    assert "skipped zhoblimp" in capsys.readouterr().out
    accuracy = json.loads(output.read_text())["fixture_pairs"]["accuracy"]
    loaded = load_for_eval(str(tmp_path / "run"))
    scorer = scoring.SentenceScorer(loaded.model, loaded.params, Scoring.CAUSAL, loaded.tokenizer.mask_id)
    pairs = minimal_pairs.read_pairs([data_dir / "order.jsonl"], "zhoblimp")
    assert accuracy == pytest.approx(minimal_pairs.evaluate_pairs(scorer, loaded.tokenizer, pairs, False)["accuracy"])
    details = json.loads(output.with_name("results_details.json").read_text())
    assert details["tasks"]["fixture_pairs"]["num_items"] == 2
