"""Minimal-pair readers, accuracy rules (ties, UNK, macro average) and the task runner."""
import dataclasses
import pathlib

import flax.linen as nn
import jax
import numpy as np
import pytest

from babylm_jax.corpus.tokenizer import CharTokenizer
from babylm_jax.core.families import Scoring
from babylm_jax.eval.zero_shot import minimal_pairs, scoring
from babylm_jax.eval import runner
from babylm_jax.tasks import registry as tasks
from babylm_jax.config.evaluation import ScoringSettings, default_settings
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer
from babylm_jax.eval.loaded import LoadedModel

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


def _read(task: str, limit=None):
    spec = tasks.get_task(task)
    return minimal_pairs.read_pairs(spec.find_files(FIXTURES), spec.pair_format, limit)


def test_readers_map_each_format_to_uid_and_phenomenon():
    zhoblimp = _read("zhoblimp")  # blank line skipped; ZhoBLiMP-excluded/ never read
    assert [p.uid for p in zhoblimp] == ["ba_test"] * 3 + ["classifier_test"] * 2
    assert {p.phenomenon for p in zhoblimp} == {"BA", "classifier"}
    assert zhoblimp[0].good == "小猫把鱼吃了。" and zhoblimp[0].bad == "小猫把吃了鱼。"
    xcomps = _read("xcomps_zh")  # no UID field: the file is one UID
    assert {p.uid for p in xcomps} == {"xcomps_test"} and xcomps[1].bad == "书会游。"
    structure = _read("hanzi_structure")
    assert [(p.uid, p.phenomenon) for p in structure] == [
        ("left_part", "left_right"), ("right_part", "left_right"), ("top_part", "top_bottom")]
    pinyin = _read("hanzi_pinyin")
    assert [(p.uid, p.phenomenon) for p in pinyin] == [("initial", "initial"), ("final", "final")]
    assert [p.good for p in _read("zhoblimp", limit=4)] == [p.good for p in zhoblimp[:4]]


def test_hanzi_files_in_the_prepared_shape(tmp_path):
    probe = pathlib.Path(__file__).parents[1] / "experiments" / "hanzi_probe"
    for task in ("hanzi_structure", "hanzi_pinyin"):
        pairs = minimal_pairs.read_pairs(sorted((probe / task).glob("*.jsonl")), task)
        assert len(pairs) >= 200 and len({p.uid for p in pairs}) >= 4
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"sentence_good": "a", "sentence_bad": "b", "UID": "u", "phenomenon": "p"}\n'
                    '{"sentence_good": "c", "sentence_bad": "d", "condition": "initial"}\n'
                    '{"sentence_good": "e", "sentence_bad": "f", "UID": "u"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"mixed.jsonl:3: missing field 'phenomenon'"):
        minimal_pairs.read_pairs([path], "hanzi_pinyin")
    pairs = minimal_pairs.read_pairs([path], "hanzi_pinyin", limit=2)
    assert [(p.uid, p.phenomenon) for p in pairs] == [("u", "p"), ("initial", "initial")]


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"sentence_good": "a", "sentence_bad": "b", "condition": "c"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON"):
        minimal_pairs.read_pairs([path], "hanzi_pinyin")
    path.write_text('{"sentence_good": "a", "sentence_bad": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl:1: missing field 'condition'"):
        minimal_pairs.read_pairs([path], "hanzi_pinyin")


def test_ties_count_as_correct_and_strict_counts_them_wrong():
    stats = minimal_pairs.pair_accuracy(
        np.array([-1.0, -2.0, -3.0, -4.0]), np.array([-2.0, -2.0, -1.0, -4.0]), ["u"] * 4, ["p"] * 4)
    assert stats["accuracy"] == 0.75 and stats["accuracy_strict"] == 0.25 and stats["num_ties"] == 2


def test_macro_average_over_uids_by_hand():
    # UID a: 2 of 3 right; UID b: 1 of 1; phenomenon P holds both, Q holds c: 0 of 2.
    good = np.array([0.0, 0.0, -5.0, 0.0, -5.0, -5.0])
    bad = np.array([-1.0, -1.0, 0.0, -1.0, 0.0, 0.0])
    stats = minimal_pairs.pair_accuracy(good, bad, list("aaabcc"), list("PPPPQQ"))
    assert stats["per_uid"] == {"a": 2 / 3, "b": 1.0, "c": 0.0}
    assert stats["accuracy"] == pytest.approx((2 / 3 + 1 + 0) / 3)  # not the micro 3/6
    assert stats["per_phenomenon"] == pytest.approx({"P": (2 / 3 + 1) / 2, "Q": 0.0})


def _tiny_loaded(tokenizer, family="causal") -> LoadedModel:
    config = ModelConfig(family=family, vocab_size=tokenizer.vocab_size, d_model=32, num_layers=1, num_heads=2,
                         d_ff=64, max_len=64)
    model = Transformer(config)
    shapes = jax.eval_shape(model.init, jax.random.key(0), np.zeros((1, 8), np.int32))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: (0.3 * rng.standard_normal(x.shape)).astype(np.float32), nn.meta.unbox(shapes))
    return LoadedModel(config=None, model=model, params=params, tokenizer=tokenizer, step=7, tokens_seen=0,
                       words_seen=0.0, used_ema=False)


def _fixture_characters() -> list[str]:
    text = "".join(p.good + p.bad for task in ("hanzi_structure", "hanzi_pinyin", "zhoblimp") for p in _read(task))
    return sorted(set(text))


def test_unk_rule_flips_exactly_the_items_with_unk():
    characters = [c for c in _fixture_characters() if c not in "女宀"]  # 女: a good sentence; 宀: another
    tokenizer = CharTokenizer(characters, byte_fallback=False)
    loaded = _tiny_loaded(tokenizer)
    pairs = _read("hanzi_structure")
    scorer = scoring.SentenceScorer(loaded.model, loaded.params, Scoring.CAUSAL, tokenizer.mask_id, batch_size=8, row_len=32)
    good, bad, has_unk = minimal_pairs.score_pairs(scorer, tokenizer, pairs)
    assert has_unk.tolist() == [True, False, True]
    with_rule = minimal_pairs.evaluate_pairs(scorer, tokenizer, pairs, unk_is_wrong=True)
    without = minimal_pairs.evaluate_pairs(scorer, tokenizer, pairs, unk_is_wrong=False)
    correct = good >= bad
    for i, pair in enumerate(pairs):
        assert without["per_uid"][pair.uid] == float(correct[i])
        assert with_rule["per_uid"][pair.uid] == float(correct[i] and not has_unk[i])
    assert with_rule["num_forced_wrong"] == 2
    # A byte-fallback tokenizer has no UNK id: the rule never fires.
    fallback = CharTokenizer(characters, byte_fallback=True)
    assert not minimal_pairs.score_pairs(scorer, fallback, pairs)[2].any()


@pytest.mark.slow
def test_run_task_on_fixtures():
    tokenizer = CharTokenizer(_fixture_characters(), byte_fallback=True)
    loaded = _tiny_loaded(tokenizer, family="mlm")
    settings = dataclasses.replace(default_settings(), scoring=ScoringSettings(batch_size=8, row_len=32,
                                                                               within_word_l2r=False))
    result = runner.run_registry_task(tasks.get_task("zhoblimp"), loaded, FIXTURES, settings)
    assert set(result.values) == {"accuracy"}
    details = result.details
    assert details["num_items"] == 5 and details["num_uids"] == 2 and details["scoring"] == "pll"
    # Per-UID accuracies are hit counts over 3 (ba_test) and 2 (classifier_test) pairs; the macro
    # average itself is pinned by hand in test_macro_average_over_uids_by_hand.
    per_uid = details["per_uid"]
    assert set(per_uid) == {"ba_test", "classifier_test"}
    ba, classifier = round(per_uid["ba_test"] * 3), round(per_uid["classifier_test"] * 2)
    assert per_uid == {"ba_test": ba / 3, "classifier_test": classifier / 2} and 0 <= ba <= 3 and 0 <= classifier <= 2
    assert result.values["accuracy"] == pytest.approx((ba / 3 + classifier / 2) / 2)
    assert set(result.figures) == {"per_phenomenon"}


def test_word_ids_follow_jieba_words():
    tokenizer = CharTokenizer(list("我喜欢猫"), byte_fallback=True)
    assert minimal_pairs.word_ids_for(tokenizer, "我喜欢猫", 4) == [0, 1, 1, 2]


def test_real_zhoblimp_is_118_uids_of_300_pairs(data_dir):
    spec = tasks.get_task("zhoblimp")
    files = spec.find_files(data_dir)
    assert all("ZhoBLiMP-excluded" not in str(f) for f in files)
    pairs = minimal_pairs.read_pairs(files, "zhoblimp")
    counts = {}
    for p in pairs:
        counts[p.uid] = counts.get(p.uid, 0) + 1
    assert len(counts) == 118 and set(counts.values()) == {300}
    assert len({p.phenomenon for p in pairs}) == 15
