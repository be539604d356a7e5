"""The faster segmenter cuts exactly as jieba.cut does (the official word count's rule)."""
from __future__ import annotations

import itertools
import json
import random
import sys

import numpy as np
import pytest

from babylm_jax.config import cli
from babylm_jax.core import workers
from babylm_jax.corpus import builtin, corpus_cache, segmenter, words

pytest.importorskip("rjieba")

EDGE_CASES = [
    "我们常在吃早饭时看电视。",  # 常在 is a dictionary word the route splits: jieba keeps 常/在, jieba-rs's HMM joins them
    "这套书（1-3）都翻的很旧了，3-4岁阶段的数学。",
    "欢迎交流切磋。www.smallstonesoft.com 或 QQ: 12345678",
    "T恤和B超，卡拉OK，3.14%的人用C++和C#。",
    "第一行\r\n第二行\n\n\t第三行\u3000全角空格 半角空格",
    "𠀀𠀁鿖鿕龥，扩展区的字和兼容区的字：﨑。",
    "",
    " ",
    "。。。！？",
    "张小明说：“李华华和王芳芳是好朋友。”",
]


@pytest.fixture(scope="module")
def fast() -> segmenter.FastJieba:
    return segmenter.FastJieba()


def _random_texts(count: int, seed: int) -> list[str]:
    """Texts mixing dictionary words, unknown characters, letters, digits, `+#&._%-`, spaces and punctuation."""
    words.init_jieba()
    import jieba

    rng = random.Random(seed)
    dictionary = [w for w, f in itertools.islice(jieba.dt.FREQ.items(), 0, 400_000, 97) if f]
    pieces = [lambda: rng.choice(dictionary), lambda: chr(rng.randint(0x4E00, 0x9FD5)),
              lambda: rng.choice("abcXYZ0123456789+#&._%-"), lambda: rng.choice(" \t\n\r\n\u3000"),
              lambda: rng.choice("，。！？；：“”（）、…—"), lambda: chr(rng.randint(0x9FD6, 0x9FFF))]
    weights = [10, 6, 3, 1, 2, 1]
    return ["".join(rng.choices(pieces, weights)[0]() for _ in range(rng.randint(1, 40))) for _ in range(count)]


def test_edge_cases_cut_as_jieba_cuts(fast):
    for text in EDGE_CASES:
        assert fast.segment(text) == words.jieba_words(text), text


def test_random_mixed_texts_cut_as_jieba_cuts(fast):
    texts = _random_texts(3000, seed=0)
    differing = [t for t in texts if fast.segment(t) != words.jieba_words(t)]
    assert not differing, differing[:3]
    assert all(fast.lengths(t) == [len(w) for w in words.jieba_words(t)] for t in texts[:300])


@pytest.mark.slow
def test_builtin_corpus_documents_cut_as_jieba_cuts(fast):
    documents = [text for path in builtin.builtin_files() for _, text in itertools.islice(builtin.iter_builtin_file(path), 300)]
    assert len(documents) > 300
    for text in documents:
        assert fast.segment(text) == words.jieba_words(text), text[:40]


def test_hmm_matches_jieba_finalseg_with_ties_and_unknown_characters():
    from jieba import finalseg

    hmm = segmenter.JiebaHMM()
    rng = random.Random(1)
    alphabet = [chr(c) for c in range(0x4E00, 0x4E00 + 4000, 3)] + ["鿕", "鿐", "㐀"]
    runs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 15))) for _ in range(20_000)]
    runs += ["鿕鿕", "㐀㐀㐀", "ab12.5%中文", "3.14%和abc"]
    for run in runs:
        assert hmm.cut_run(run) == list(finalseg.cut(run)), run


def test_memo_tables_stay_bounded(fast, monkeypatch):
    monkeypatch.setattr(segmenter, "_MEMO_ENTRIES", 50)
    for text in _random_texts(300, seed=2):
        assert fast.segment(text) == words.jieba_words(text)
    assert len(fast._block_memo) <= 50 and len(fast._run_memo) <= 50


def test_word_lengths_fall_back_to_jieba(monkeypatch):
    assert segmenter.make_word_lengths(False)[1] == "jieba.cut"
    assert segmenter.make_word_lengths(True)[1] != "jieba.cut"
    monkeypatch.setitem(sys.modules, "rjieba", None)  # as if not installed
    word_lengths, name = segmenter.make_word_lengths(True)
    assert name == "jieba.cut" and word_lengths(EDGE_CASES[0]) == [len(w) for w in words.jieba_words(EDGE_CASES[0])]


@pytest.mark.parametrize("raised", ["RuntimeError('broken build')", "ImportError('undefined symbol: x')"])
def test_an_rjieba_that_fails_to_load_is_one_line_naming_it_and_the_ways_on(raised, tmp_path, monkeypatch):
    (tmp_path / "rjieba").mkdir()
    (tmp_path / "rjieba" / "__init__.py").write_text(f"raise {raised}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rjieba")
    with pytest.raises(segmenter.SegmenterLoadError) as error:
        segmenter.make_word_lengths(True)
    line = workers.describe_start_failure(error.value)  # what a worker that cannot start reports
    assert line.startswith(f"SegmenterLoadError: loading rjieba failed ({raised.split('(')[0]}: ")
    assert "pip install --force-reinstall rjieba" in line and "pip uninstall rjieba" in line
    assert isinstance(error.value, cli.USER_ERRORS)  # one line and exit 2 where counting runs in the command
    assert segmenter.make_word_lengths(False)[1] == "jieba.cut"  # data.word_counter="jieba" never loads it


def _count(tmp_path, name: str, raw) -> dict:
    out = corpus_cache.count_shard(str(tmp_path / name), raw, str.strip, None)
    shard = tmp_path / name
    return {"words": np.load(shard / "doc_words.npy").tolist(), "raw": json.loads((shard / "raw_words.json").read_text()),
            "bits": np.load(shard / "word_bits.npy").tolist(), "checks": json.loads((shard / "checks.json").read_text()),
            "out": out}


def test_count_shard_checks_the_faster_segmenter_and_recounts_with_jieba(tmp_path, monkeypatch, caplog):
    raw = [(0, text) for text in _random_texts(450, seed=3)]
    monkeypatch.setattr(corpus_cache, "_WORD_LENGTHS", segmenter.make_word_lengths(False))
    reference = _count(tmp_path, "reference", raw)
    assert reference["checks"] == {"counter": "jieba.cut"}
    monkeypatch.setattr(corpus_cache, "_WORD_LENGTHS", segmenter.make_word_lengths(True))
    checked = _count(tmp_path, "fast", raw)
    assert checked["checks"]["checked"] == 3  # documents 0, 200 and 400
    assert {k: checked[k] for k in ("words", "raw", "bits")} == {k: reference[k] for k in ("words", "raw", "bits")}

    def wrong_on_the_200th(text):  # differs from jieba on one checked document only
        lengths = segmenter.FastJieba().lengths(text)
        return lengths[:-2] + [lengths[-2] + lengths[-1]] if text == raw[200][1].strip() else lengths

    monkeypatch.setattr(corpus_cache, "_WORD_LENGTHS", (wrong_on_the_200th, "a wrong segmenter"))
    recounted = _count(tmp_path, "recounted", raw)
    assert recounted["checks"]["counter"].startswith("jieba.cut (the faster segmenter differed")
    assert {k: recounted[k] for k in ("words", "raw", "bits")} == {k: reference[k] for k in ("words", "raw", "bits")}
    assert "counting its shard with jieba.cut" in caplog.text
