"""Tokenizers: round trips, character offsets, byte fallback, save/load, fixed special ids."""
import collections
import json
import pathlib

import numpy as np
import pytest

from babylm_jax.config.data import TokenizerConfig
from babylm_jax.core.vocab import Framing
from babylm_jax.corpus import token_cache
from babylm_jax.corpus import words
from babylm_jax.corpus import tokenizer as tok
from babylm_jax.corpus import tokenizer_kinds, tokenizer_training
from babylm_jax.tasks import unk_audit
from fixtures.data import synthetic

TEXT = "我们今天学习中文，小猫喜欢吃鱼！ 天气很好。"
UNSEEN = "我们龘🙂你ü。"


def _config(kind: str, byte_fallback: bool, **overrides) -> TokenizerConfig:
    return TokenizerConfig(**{"kind": kind, "byte_fallback": byte_fallback, "character_coverage": 1.0, "min_char_count": 1,
                              "required_characters": "", "training_sentences": 1000, **overrides})


@pytest.fixture(scope="module", params=[("unigram", True), ("bpe", False), ("char", True), ("char", False),
                                        ("words", True), ("words", False)], ids=str)
def trained(request):
    kind, byte_fallback = request.param
    texts = synthetic.documents(300) + [TEXT]
    return tokenizer_kinds.train_tokenizer(texts, _config(kind, byte_fallback), 400)


def test_special_ids_are_fixed(trained):
    assert (trained.pad_id, trained.bos_id, trained.eos_id, trained.mask_id, trained.cls_id, trained.sep_id) == (0, 2, 3, 4, 5, 6)
    assert trained.vocab_size <= 400
    assert trained.id_to_piece(4) == "[MASK]"
    assert trained.encode("[MASK]") != [trained.mask_id]  # specials are never produced from text
    # UNK (id 1) is emitted for unseen text, and listed as special, exactly when there is no byte fallback.
    assert (1 in trained.encode(UNSEEN)) == (not trained.byte_fallback)
    assert set(trained.special_ids) >= {0, 2, 3, 4, 5, 6}
    assert (1 in trained.special_ids) == (trained.unk_id is not None)  # id 1 is UNK exactly when UNK exists
    assert trained.unk_id in (None, 1)


def test_round_trip_and_offsets(trained):
    ids, offsets = trained.encode_with_offsets(TEXT)
    assert trained.decode(ids) == TEXT
    assert len(offsets) == len(ids)
    for i, (start, end) in zip(ids, offsets):
        piece = trained.id_to_piece(i).replace("\u2581", " ")
        assert TEXT[start:end] == piece
    # Spans tile the text.
    assert [s for s, _ in offsets] == [0] + [e for _, e in offsets[:-1]]
    assert offsets[-1][1] == len(TEXT)


def test_unseen_characters(trained):
    ids, offsets = trained.encode_with_offsets(UNSEEN)
    if trained.byte_fallback:
        assert tok.UNK_ID not in ids
        assert trained.decode(ids) == UNSEEN
    else:
        assert tok.UNK_ID in ids
    covered = {c for s, e in offsets for c in range(s, e)}
    assert covered == set(range(len(UNSEEN)))
    for i, (start, end) in zip(ids, offsets):
        if tok._is_byte_piece(trained.id_to_piece(i)):
            assert end - start == 1 and UNSEEN[start] in "龘🙂ü"


def _shard_texts() -> list[str]:
    return [TEXT, UNSEEN, "龘龘龘 龘", "  前后有空格  ", "a", UNSEEN + TEXT] + synthetic.documents(40)


def test_offsets_batch_equals_offsets_array_text_by_text(trained):
    texts = _shard_texts()
    ids = trained.encode_batch(texts)
    batch = trained.offsets_batch(texts, ids)
    assert batch.tolist() == np.concatenate([trained.offsets_array(t, i) for t, i in zip(texts, ids)]).tolist()


def _reference_shard(tokenizer, texts: list[str], char_bits: np.ndarray, framing: Framing) -> dict:
    """The obvious per-document token cache shard: framed ids, word starts, lengths."""
    tokens, starts, base = [], [], 0
    for text in texts:
        ids, offsets = tokenizer.encode_with_offsets(text)
        tokens += framing.frame(ids)
        first_of_char = [k == 0 or offsets[k][0] != offsets[k - 1][0] for k in range(len(ids))]
        starts += [1] + [int(first and s < len(text) and char_bits[base + min(s, len(text) - 1)])
                         for first, (s, _) in zip(first_of_char, offsets)] + [1]
        base += len(text)
    return {"tokens": tokens, "word_starts": starts, "doc_lengths": [len(tokenizer.encode(t)) + 2 for t in texts]}


def test_tokenize_shard_equals_the_per_document_reference(trained, tmp_path):
    texts = _shard_texts()
    count_dir = tmp_path / "count"
    count_dir.mkdir()
    (count_dir / "texts.json").write_text(json.dumps(texts, ensure_ascii=False))
    char_bits = np.concatenate([words.word_start_mask(words.jieba_words(t)) for t in texts])
    np.save(count_dir / "doc_chars.npy", np.asarray([len(t) for t in texts], np.int64))
    np.save(count_dir / "word_bits.npy", np.packbits(char_bits))
    trained.save(tmp_path / "tokenizer")
    framing = Framing(opener_id=5, closer_id=6, causal=False)
    token_cache.tokenize_shard(str(count_dir), str(tmp_path / "out"), str(tmp_path / "tokenizer"), framing)
    got = {name: np.load(tmp_path / "out" / f"{name}.npy").tolist() for name in ("tokens", "word_starts", "doc_lengths")}
    assert got == _reference_shard(trained, texts, char_bits, framing)


def test_save_load(trained, tmp_path):
    trained.save(tmp_path / "t")
    loaded = tokenizer_kinds.load_tokenizer(tmp_path / "t")
    assert loaded.kind == trained.kind and loaded.vocab_size == trained.vocab_size
    assert loaded.encode(TEXT + UNSEEN) == trained.encode(TEXT + UNSEEN)


def test_fast_offsets_match_sentencepiece_proto():
    sp = tokenizer_kinds.train_tokenizer(synthetic.documents(200), _config("bpe", True), 400)
    text = TEXT + UNSEEN + " 我 们\n"
    ids = sp.encode(text)
    fast, proto = sp.offsets_array(text, ids), sp._proto_offsets(text)
    assert fast[:, 0].tolist() == proto[:, 0].tolist()
    is_byte = [tok._is_byte_piece(sp.id_to_piece(i)) for i in ids]
    assert any(is_byte)
    # SentencePiece gives a character's last byte piece its span (earlier ones are empty);
    # here every byte piece of a character carries that span.
    for j, byte in enumerate(is_byte):
        assert fast[j, 1] == (fast[j, 0] + 1 if byte else proto[j, 1])


def test_char_min_count():
    char = tokenizer_kinds.train_tokenizer(["甲甲乙"], _config("char", False, min_char_count=2), 100)
    assert char.encode("甲乙") == [char.encode("甲")[0], tok.UNK_ID]


def test_required_character_sets():
    counts = {"我": 5, "们": 9, "a": 50, "龘": 1, "𠀀": 2, "。": 3}
    corpus = tokenizer_training.required_characters("corpus_cjk", counts)
    assert corpus[:5] == ["们", "我", "。", "𠀀", "龘"] and set(corpus) == set("们我𠀀龘" + tokenizer_training.CHINESE_PUNCTUATION)
    basic = tokenizer_training.required_characters("cjk_basic", counts)
    assert len(basic) == 0x9FFF - 0x4E00 + 1 + 1 + len(tokenizer_training.CHINESE_PUNCTUATION)  # + 𠀀 from the corpus
    assert basic[:2] == ["们", "我"] and tokenizer_training.required_characters("", counts) == []


@pytest.mark.parametrize("kind,byte_fallback", [("char", False), ("bpe", True), ("unigram", False)])
def test_required_characters_get_their_own_ids(kind, byte_fallback):
    texts = synthetic.documents(300) + [TEXT]
    required = [chr(c) for c in range(0x4E00, 0x4E00 + 500)] + list("们龘")
    trained = tokenizer_kinds.train_tokenizer(texts, _config(kind, byte_fallback), 1200, required)
    assert [trained.id_to_piece(i) for i in range(7)] == list(tok.SPECIAL_PIECES)
    for ch in required:  # never UNK, never bytes: one piece that is the character
        assert [trained.id_to_piece(i) for i in trained.encode(ch)] == [ch]
    assert trained.decode(trained.encode(TEXT)) == TEXT
    with pytest.raises(ValueError, match=r"required_characters needs 502 .*model.vocab_size=300"):
        tokenizer_kinds.train_tokenizer(texts, _config(kind, byte_fallback), 300, required)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_radicals_and_parts_are_tokens_of_their_own(kind):
    texts = synthetic.documents(300) + [TEXT, "伙伴们说汞有毒。"]
    counts = {c: 1 for c in "".join(texts)}
    required = tokenizer_training.required_characters(tokenizer_training.PARTS_SETTING, counts)
    assert {"亻", "半", "工", "水", "⺮", "⼝"} <= set(required)  # 伴 = 亻 + 半, 汞 = 工 over 水, two radical blocks
    assert len([c for c in required if 0x2E80 <= ord(c) <= 0x2FDF]) == 329
    config = _config(kind, True, required_characters=tokenizer_training.PARTS_SETTING)
    trained = tokenizer_kinds.train_tokenizer(texts, config, 1400, required)
    for ch in "亻半工水⺮⼝":
        assert [trained.id_to_piece(i) for i in trained.encode(ch)] == [ch]
    if kind == "bpe":  # user symbols: never inside a longer piece
        pieces = [trained.id_to_piece(i) for i in range(trained.vocab_size)]
        assert not [p for p in pieces if len(p) > 1 and "半" in p]
    assert trained.decode(trained.encode("伙伴⺮")) == "伙伴⺮"


def test_no_unk_on_hanzi_task_files():
    tasks = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"
    counts = {c: 1 for c in "".join(synthetic.documents(50))}
    plain = tokenizer_training.char_tokenizer_from_counts(counts, 30000, 1, False)
    assert sum(t["unk_items"] for t in unk_audit.unk_audit(plain, tasks).values()) > 0
    required = tokenizer_training.required_characters("cjk_basic", counts)
    covered = tokenizer_training.char_tokenizer_from_counts(counts, 30000, 1, False, required)
    report = unk_audit.unk_audit(covered, tasks)
    assert report and all(t["unk_items"] == 0 and t["items"] > 0 for t in report.values())


def _jieba_cut(text: str) -> list[str]:
    import jieba

    words.init_jieba()
    return list(jieba.cut(text))


def _reference_word_ids(tokenizer, text: str) -> list[int]:
    """The obvious reading of the words kind: plain jieba.cut, then per word the longest vocabulary piece at
    each position (any length), else the character's byte pieces or UNK."""
    pieces = {tokenizer.id_to_piece(i): i for i in range(tokenizer_training.reserved_ids(tokenizer.byte_fallback), tokenizer.vocab_size)}
    ids = []
    for word in _jieba_cut(text):
        while word:
            known = [p for p in pieces if word.startswith(p)]
            if known:
                piece = max(known, key=len)
                ids.append(pieces[piece])
                word = word[len(piece):]
            else:
                ids += ([len(tok.SPECIAL_PIECES) + b for b in word[0].encode("utf-8")] if tokenizer.byte_fallback
                        else [tok.UNK_ID])
                word = word[1:]
    return ids


@pytest.fixture(scope="module")
def word_tokenizer():
    return tokenizer_kinds.train_tokenizer(synthetic.documents(300) + [TEXT], _config("words", True, min_char_count=2), 360)


def test_words_equal_the_reference_on_plain_jieba_cut(word_tokenizer):
    texts = _shard_texts() + ["图书馆里的学生们喜欢看书", "abc123 我们 2024年 ３点", "猫喜欢吃鱼吃鱼吃鱼", ""]
    for text in texts:
        assert word_tokenizer.encode(text) == _reference_word_ids(word_tokenizer, text), text
    no_fallback = tokenizer_kinds.train_tokenizer(synthetic.documents(300), _config("words", False, min_char_count=2), 100)
    for text in texts:
        assert no_fallback.encode(text) == _reference_word_ids(no_fallback, text), text


def test_word_pieces_never_cross_a_word_boundary(word_tokenizer):
    text = "".join(_shard_texts())
    ends = set(np.cumsum([len(w) for w in _jieba_cut(text)]).tolist()) | {0}
    ids, spans = word_tokenizer.encode_with_offsets(text)
    assert any(word_tokenizer.id_to_piece(i).startswith("<0x") for i in ids)
    starts = {start for start, _ in spans}
    assert ends - {len(text)} <= starts  # every word begins a token
    for start, end in spans:  # no token runs over a word's end
        assert not any(start < e < end for e in ends)


def test_frequent_words_are_whole_and_characters_come_first(word_tokenizer):
    counts = collections.Counter(w for d in synthetic.documents(300) + [TEXT] for w in _jieba_cut(d) if len(w) > 1)
    pieces = [word_tokenizer.id_to_piece(i) for i in range(tokenizer_training.reserved_ids(True), word_tokenizer.vocab_size)]
    multi = [p for p in pieces if len(p) > 1]
    assert pieces[:len(pieces) - len(multi)] == [p for p in pieces if len(p) == 1]  # characters, then words
    assert multi == sorted(multi, key=lambda w: (-counts[w], w)) and multi[0] == counts.most_common(1)[0][0]
    assert len(multi) == 360 - tokenizer_training.reserved_ids(True) - (len(pieces) - len(multi))  # words fill the vocabulary
    rare = [w for w, n in counts.items() if n >= 2 and w not in multi]
    assert rare and all(len(word_tokenizer.encode(w)) > 1 for w in rare)
    alone = [w for w in multi if _jieba_cut(w) == [w]]  # jieba may cut a word of some context apart alone
    assert len(alone) > len(multi) // 2
    assert all(word_tokenizer.encode(w) == [tokenizer_training.reserved_ids(True) + pieces.index(w)] for w in alone)


def test_words_vocab_without_room_for_words_is_refused():
    with pytest.raises(ValueError, match="model.vocab_size=300 leaves no id for a word"):
        tokenizer_kinds.train_tokenizer(synthetic.documents(300), _config("words", True), 300)


def test_words_keep_every_required_character():
    required = tokenizer_training.required_characters("cjk_basic", {})
    words_kind = tokenizer_training.word_tokenizer_from_counts({"我": 5}, {"我们": 3}, 21_500, 1, False, required)
    assert words_kind.encode("我们") == [words_kind.vocab_size - 1]
    tasks = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"
    report = unk_audit.unk_audit(words_kind, tasks)
    assert report and all(t["unk_items"] == 0 and t["items"] > 0 for t in report.values())


def test_a_vocabulary_too_large_for_the_text_says_the_size_to_set():
    with pytest.raises(ValueError, match=r"vocab_size=4000: .* set model.vocab_size to at most \d+, or give it more "
                                         r"text") as error:
        tokenizer_kinds.train_tokenizer(synthetic.documents(50), _config("bpe", True), 4000)
    assert "raise model.vocab_size" not in str(error.value)
