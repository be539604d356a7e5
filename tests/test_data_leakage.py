"""Leakage check: hashed exact-sentence and n-gram overlap against a slow reference."""
import json

import numpy as np
import pytest

from babylm_jax.config.schema import RunConfig
from babylm_jax.tasks import leakage
from babylm_jax.corpus import preparation
from babylm_jax.config.data import DataConfig
from fixtures.data import synthetic

EVAL_GOOD = "小猫把鱼吃掉了。"
EVAL_LONG = "老师说明天早上八点在图书馆门口集合大家别迟到"


def _eval_dir(tmp_path):
    (tmp_path / "zhoblimp" / "ZhoBLiMP").mkdir(parents=True)
    (tmp_path / "zhoblimp" / "ZhoBLiMP" / "x.jsonl").write_text(
        json.dumps({"UID": "x", "sentence_good": EVAL_GOOD, "sentence_bad": "鱼把小猫吃掉了。"}, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp_path / "afqmc").mkdir()
    (tmp_path / "afqmc" / "dev.json").write_text(
        json.dumps({"sentence1": EVAL_LONG, "sentence2": "好的", "label": "0"}, ensure_ascii=False) + "\n", encoding="utf-8")
    return tmp_path


def _slow_ngram_overlap(train: str, item: str, n: int) -> bool:
    grams = {item[i : i + n] for i in range(len(item) - n + 1)}
    return any(line[i : i + n] in grams for line in train.split("\n") for i in range(len(line) - n + 1))


def test_finds_planted_and_nothing_in_clean(tmp_path):
    normalize = DataConfig.from_config(synthetic.base_config().data).normalize
    detector = leakage.LeakDetector.from_data_dir(_eval_dir(tmp_path / "eval"), 13, normalize)
    clean = synthetic.documents(50)
    report = detector.report(clean)
    assert report["training_lines_hit"] == 0
    assert all(t["leaked"] == 0 for t in report["tasks"].values())
    planted = clean[:3] + ["我们今天学习。" + EVAL_GOOD + "他很好。", "前面" + EVAL_LONG[2:17] + "后面"]
    report = detector.report(planted)
    assert report["tasks"]["zhoblimp"] == {"items": 2, "exact": 1, "ngram": 0, "leaked": 1}
    assert report["tasks"]["afqmc"] == {"items": 2, "exact": 0, "ngram": 1, "leaked": 1}
    assert report["training_lines_hit"] == 2 and report["training_documents_hit"] == 2
    assert detector.keep_lines(planted[2:]).tolist() == [True, False, False]


def test_ngram_hashes_match_slow_reference(tmp_path):
    rng = np.random.default_rng(1)
    alphabet = "甲乙丙丁戊"
    items = ["".join(rng.choice(list(alphabet), 20)) for _ in range(20)]
    trains = ["".join(rng.choice(list(alphabet + "\n"), 60)) for _ in range(40)]
    detector = leakage.LeakDetector([("t", s) for s in items], 6, DataConfig.from_config(synthetic.base_config().data).normalize)
    for train in trains:
        fast = detector.report([train])["tasks"]["t"]["ngram"]
        slow = sum(_slow_ngram_overlap(train, item, 6) for item in items)
        assert fast == slow


@pytest.mark.parametrize("kind", ["char", "words"])
def test_drop_option_removes_leaked_lines(tmp_path, kind):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    docs = synthetic.documents(40) + [EVAL_GOOD]
    (corpus_dir / "a.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    config = synthetic.tiny_config(corpus_dir, tokenizer=kind, txt_documents="line")
    config.data.leakage.data_dir = str(_eval_dir(tmp_path / "eval"))
    config.data.leakage.drop = True
    prepared = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert prepared.budget_report["leakage_dropped_lines"] == 1
    assert EVAL_GOOD not in list(prepared.corpus.iter_texts())
    assert prepared.budget_report["documents"] == 40
    assert prepared.tokenizer.kind == kind and prepared.tokens.num_documents == 40


def test_membership_with_the_top_bits_filter_equals_the_binary_search():
    rng = np.random.default_rng(0)
    members = np.unique(rng.integers(0, 2**64, 50_000, dtype=np.uint64))
    near = members[:500] ^ np.uint64(1)  # share the filter's top bits with a member, are not members
    values = np.concatenate([members[::7], near, rng.integers(0, 2**64, 20_000, dtype=np.uint64)])
    rng.shuffle(values)
    filtered = leakage._member(values, members, leakage._top_bits_table(members))
    expected = np.isin(values, members)
    np.testing.assert_array_equal(filtered, expected)
    assert expected.sum() == len(members[::7])
