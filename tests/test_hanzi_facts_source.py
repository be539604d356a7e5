"""`data.hanzi_facts`: prepare writes the facts into the workdir, counts them inside the budget, checks them
for leakage and keys them by what makes them; a config without them prepares as before."""
import json
import re
import shutil

import pytest

from babylm_jax.config.data import DataConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import budget, hanzi_facts, preparation, run_inputs, sources
from babylm_jax.tasks import leakage
from fixtures.data import synthetic

FACTS = hanzi_facts.SOURCE_NAME


def _config(tmp_path, share=0.5, **facts):
    config = synthetic.tiny_config(synthetic.write_txt_corpus(tmp_path / "corpus", 40))
    config.data.word_budget = 6000
    config.data.hanzi_facts.update(share=share, characters=8, **facts)
    config.data.tokenizer.required_characters, config.model.vocab_size = "corpus_cjk", 1000
    return config


def _facts_folders(workdir):
    return sorted((workdir / "data").glob(f"{FACTS}-*"))


@pytest.mark.slow
def test_prepare_writes_counts_and_reuses_the_facts(tmp_path, capsys):
    config = _config(tmp_path)
    prepared = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    [folder] = _facts_folders(tmp_path / "w")
    manifest = json.loads((folder / hanzi_facts.MANIFEST).read_text())
    report = prepared.budget_report
    assert list(report["sources"]) == [FACTS, config.data.corpus]  # their own source, first
    assert report["sources"][FACTS]["words"] == manifest["words"] <= 3000 < manifest["words"] + 400  # share x budget
    assert report["sources"][FACTS]["documents"] == manifest["documents"] > 8  # more than one pass
    assert report["words"] <= config.data.word_budget and "hanzi facts:" in capsys.readouterr().out
    # Prepared again: the facts and every cache are reused, nothing is written or said.
    before = (folder / hanzi_facts.OUTPUT_FILE).stat().st_mtime_ns
    again = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert again.corpus.root == prepared.corpus.root and "hanzi facts:" not in capsys.readouterr().out
    assert (folder / hanzi_facts.OUTPUT_FILE).stat().st_mtime_ns == before
    # Another seed: other facts, so another counted corpus; the first ones stay for the first settings.
    config.data.hanzi_facts.seed = 1
    other = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert len(_facts_folders(tmp_path / "w")) == 2 and other.corpus.root != prepared.corpus.root


@pytest.mark.slow
def test_the_facts_are_named_by_content_not_by_place(tmp_path):
    config = _config(tmp_path)
    data = RunConfig.from_config(config).data
    here = run_inputs.corpus_files(data, tmp_path / "a")
    there = run_inputs.corpus_files(data, tmp_path / "b")  # made again elsewhere: the same bytes, the same name
    assert f"{hanzi_facts.SOURCE_KEY}/{hanzi_facts.OUTPUT_FILE}" in here and here == there
    shutil.rmtree(_facts_folders(tmp_path / "a")[0])  # lost: made again, the same
    assert run_inputs.corpus_files(data, tmp_path / "a") == here


def test_without_facts_nothing_changes(tmp_path):
    data = RunConfig.from_config(_config(tmp_path, share=0.0)).data
    assert hanzi_facts.run_sources(data, tmp_path / "w") == sources.list_sources(data)
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_over_budget_names_the_facts(tmp_path):
    config = _config(tmp_path, share=0.9)  # 5,400 words of facts beside the corpus's ~1,000
    with pytest.raises(budget.BudgetError, match=r"of them the hanzi facts, data.hanzi_facts.share\), over "
                                                 r"data.word_budget=6,000 .*data.max_documents keeps the facts"):
        preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")


@pytest.mark.slow
def test_the_leakage_filter_reads_the_facts(tmp_path):
    config = _config(tmp_path)
    data = RunConfig.from_config(config).data
    folder = hanzi_facts.ensure_facts(data, tmp_path / "w")
    first = json.loads((folder / hanzi_facts.OUTPUT_FILE).read_text(encoding="utf-8").splitlines()[0])["text"]
    sentence = next(s for s in re.split(r"(?<=。)", first) if len(s) >= 14)
    (tmp_path / "eval" / "hanzi_structure").mkdir(parents=True)
    (tmp_path / "eval" / "hanzi_structure" / "probe.jsonl").write_text(json.dumps(
        {"sentence_good": sentence, "sentence_bad": "无关的句子。", "UID": "u", "phenomenon": "p"},
        ensure_ascii=False) + "\n", encoding="utf-8")
    config.data.leakage.update(data_dir=str(tmp_path / "eval"), drop=True)
    prepared = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert prepared.budget_report["leakage_dropped_lines"] >= 1
    assert not any(sentence in text for text in prepared.corpus.iter_texts())
    detector = leakage.LeakDetector.from_data_dir(tmp_path / "eval", 13, data.normalize)
    assert detector.report([first])["tasks"]["hanzi_structure"]["leaked"] == 1


@pytest.mark.slow
def test_the_facts_use_the_configured_text_field(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text("".join(json.dumps({"content": t}, ensure_ascii=False) + "\n"
                                            for t in synthetic.documents(40)), encoding="utf-8")
    config = _config(tmp_path)
    config.data.corpus, config.data.text_field = str(corpus), "content"
    prepared = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert prepared.budget_report["sources"][FACTS]["documents"] > 0


@pytest.mark.parametrize("key, value, message", [
    ("share", 1.0, "config key data.hanzi_facts.share: 1.0 is not in [0, 1)"),
    ("characters", 0, "config key data.hanzi_facts.characters: 0 is below 1"),
])
def test_bad_settings_name_their_key(tmp_path, key, value, message):
    config = _config(tmp_path)
    config.data.hanzi_facts[key] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        DataConfig.from_config(config.data)
