"""The exported fast tokenizer reproduces our tokenizer's ids and offsets, and adds special tokens as our scoring does."""
import itertools
import pathlib
import json

import pytest

tokenizers = pytest.importorskip("tokenizers")

from babylm_jax.config.data import TokenizerConfig  # noqa: E402
from babylm_jax.corpus import builtin  # noqa: E402
from babylm_jax.core.families import family_spec  # noqa: E402
from babylm_jax.corpus import tokenizer as tok  # noqa: E402
from babylm_jax.corpus import tokenizer_kinds, tokenizer_training  # noqa: E402
from babylm_jax.hf import fast_tokenizer  # noqa: E402

RARE = [
    "龘靐齉齾𠀀𪚥𰻞，罕见字。",  # rare CJK incl. supplementary planes: byte fallback or UNK
    "😀表情🎉和符号™",
    "  两个  空格 与\t制表\n换行 ",
    "abc ABC 123456 ４５６ 3.14",
    "“引号”（括号）——破折号……省略号",
    "",
]


def _lines(path, start, stop):
    return [t for _, t in itertools.islice(builtin.iter_builtin_file(path), start, stop) if t.strip()]


@pytest.fixture(scope="module")
def texts():
    people_daily, _, reviews_neg = builtin.builtin_files()
    train = _lines(people_daily, 0, 800)
    test = _lines(reviews_neg, 2000, 2300) + _lines(people_daily, 5000, 5100) + RARE
    return train, test


# Required characters (data.tokenizer.required_characters): 600 hanzi the training text mostly lacks.
REQUIRED = [chr(c) for c in range(0x4E00, 0x4E00 + 600)]


@pytest.fixture(scope="module", params=[("unigram", True, False), ("unigram", False, False), ("bpe", True, False),
                                        ("bpe", False, False), ("char", True, False), ("char", False, False),
                                        ("bpe", True, True), ("char", False, True)],
                ids=lambda p: f"{p[0]}-bf{int(p[1])}" + ("-required" if p[2] else ""))
def ours(request, texts):
    kind, byte_fallback, required = request.param
    config = TokenizerConfig(kind=kind, byte_fallback=byte_fallback, character_coverage=0.98, min_char_count=2,
                             required_characters="", training_sentences=1000)
    return tokenizer_kinds.train_tokenizer(texts[0], config, 2600 if required else 2000, REQUIRED if required else ())


def test_ids_and_offsets_equal_ours(ours, texts):
    fast = fast_tokenizer.build_fast_tokenizer(ours, "causal")
    test = texts[1]
    assert len(test) >= 300
    encodings = fast.encode_batch(test, add_special_tokens=False)
    fallback_or_unk = 0
    for text, encoding in zip(test, encodings):
        ids, offsets = ours.encode_with_offsets(text)
        assert encoding.ids == ids, text
        assert [tuple(o) for o in encoding.offsets] == offsets, text
        fallback_or_unk += any(i == 1 or ours.id_to_piece(i).startswith("<0x") for i in ids)
    assert fallback_or_unk >= 3  # the rare characters really went through byte fallback / UNK
    required = "".join(c for c in REQUIRED if ours.id_to_piece(ours.encode(c)[0]) == c)
    assert fast.encode(required, add_special_tokens=False).ids == ours.encode(required)
    known = [t for t in test[:20] if 1 not in ours.encode(t)]
    assert [fast.decode(e.ids) for e in fast.encode_batch(known, add_special_tokens=False)] \
        == [ours.decode(ours.encode(t)) for t in known]


def test_transformers_tokenizer_templates(ours, tmp_path):
    transformers = pytest.importorskip("transformers")
    for family in ("causal", "mlm"):
        directory = tmp_path / family
        directory.mkdir()
        for name, text in fast_tokenizer.tokenizer_texts(ours, family, max_len=64).items():
            (directory / name).write_text(text, encoding="utf-8")
        hf = transformers.AutoTokenizer.from_pretrained(directory)
        assert hf.is_fast
        assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, hf.mask_token_id, hf.cls_token_id,
                hf.sep_token_id, hf.unk_token_id) == (0, 2, 3, 4, 5, 6, 1)
        a, b = "今天天气很好。", "我们去公园吧"
        ida, idb = ours.encode(a), ours.encode(b)
        single = hf(a, return_offsets_mapping=True)
        pair = hf(a, b)["input_ids"]
        framing = family_spec(family).framing  # as the family's training documents are framed
        assert single["input_ids"] == framing.frame(ida) == ([2] + ida + [3] if family == "causal" else [5] + ida + [6])
        assert pair == framing.frame_segments([ida, idb])
        specials = [o for i, o in zip(single["input_ids"], single["offset_mapping"]) if i in (2, 3, 5, 6)]
        assert all(tuple(o) == (0, 0) for o in specials)  # the official pipeline skips them by offset
        assert [tuple(o) for i, o in zip(single["input_ids"], single["offset_mapping"]) if i not in (2, 3, 5, 6)] \
            == ours.encode_with_offsets(a)[1]
        batch = hf([a, "好"], padding=True)
        assert batch["input_ids"][1][-1] == 0 and batch["attention_mask"][1][-1] == 0
        assert "token_type_ids" not in batch
        config = json.loads((directory / "tokenizer_config.json").read_text())
        assert config["model_max_length"] == 64


# The words kind: a slow transformers tokenizer shipped with the export (tokenization_babylm_words.py).

PAIRS = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


@pytest.fixture(scope="module", params=[True, False], ids=["words-bf1", "words-bf0"])
def words_kind(request, texts):
    config = TokenizerConfig(kind="words", byte_fallback=request.param, character_coverage=1.0, min_char_count=2,
                             required_characters="", training_sentences=1000)
    return tokenizer_kinds.train_tokenizer(texts[0], config, 3000 if request.param else 2800, REQUIRED)


def _word_export(tokenizer, directory, family="causal"):
    transformers = pytest.importorskip("transformers")
    directory.mkdir()
    for name, text in fast_tokenizer.tokenizer_texts(tokenizer, family, max_len=64).items():
        (directory / name).write_text(text, encoding="utf-8")
    return transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=True)


def _pair_sentences(files, every: int = 1) -> list[str]:
    sentences = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.strip() and n % every == 0:
                row = json.loads(line)
                sentences += [row[k] for k in ("sentence_good", "sentence_bad", "acceptable_sent", "unacceptable_sent")
                              if k in row]
    return sentences


@pytest.mark.slow
def test_word_export_gives_our_ids(words_kind, texts, tmp_path):
    hf = _word_export(words_kind, tmp_path / "hf")
    assert not hf.is_fast and type(hf).__name__ == "BabyLMWordTokenizer"
    sentences = texts[1] + _pair_sentences(sorted(PAIRS.rglob("*.json*")))
    assert len(sentences) >= 400
    unknown = 0
    for text in sentences:
        ids = words_kind.encode(text)
        assert hf(text, add_special_tokens=False)["input_ids"] == ids, text
        unknown += any(i == 1 or words_kind.id_to_piece(i).startswith("<0x") for i in ids)
    assert unknown >= 3  # the rare characters went through byte fallback / UNK on both sides
    known = [t for t in texts[1][:20] if 1 not in words_kind.encode(t)]
    assert [hf.decode(hf(t, add_special_tokens=False)["input_ids"]) for t in known] == known


@pytest.mark.parametrize("family", ["causal", "mlm"])
def test_word_export_frames_as_the_family_trains(words_kind, family, tmp_path):
    hf = _word_export(words_kind, tmp_path / "hf", family)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, hf.mask_token_id, hf.cls_token_id,
            hf.sep_token_id, hf.unk_token_id) == (0, 2, 3, 4, 5, 6, 1)
    a, b = "今天天气很好。", "我们去公园吧"
    ida, idb = words_kind.encode(a), words_kind.encode(b)
    framing = family_spec(family).framing
    assert hf(a)["input_ids"] == framing.frame(ida) and hf(a, b)["input_ids"] == framing.frame_segments([ida, idb])
    words = ["我们", "图书馆", "龘"]  # the official fMRI feeds each word alone (is_split_into_words=True)
    assert hf(words, is_split_into_words=True, add_special_tokens=False)["input_ids"] \
        == [i for w in words for i in words_kind.encode(w)]
    batch = hf([a, "好"], padding=True)
    assert batch["input_ids"][1][-1] == 0 and batch["attention_mask"][1][-1] == 0 and "token_type_ids" not in batch
    hf.save_pretrained(tmp_path / "again")
    again = type(hf).from_pretrained(tmp_path / "again")
    assert again(a + b)["input_ids"] == hf(a + b)["input_ids"]


def test_word_export_without_jieba_says_how_to_get_it(words_kind, tmp_path, monkeypatch):
    hf = _word_export(words_kind, tmp_path / "hf")
    monkeypatch.setitem(__import__("sys").modules, "jieba", None)
    with pytest.raises(ImportError, match=r"cuts text into words with jieba, which is not installed: pip install jieba==0\.42\.1"):
        type(hf).from_pretrained(tmp_path / "hf")


@pytest.mark.parametrize("damage, said", [
    (lambda vocab: vocab.write_text(vocab.read_text(encoding="utf-8")[:40], encoding="utf-8"),
     r"vocab.json: damaged \(JSONDecodeError: Unterminated string"),
    (lambda vocab: vocab.write_text('{"<unk>": 1}'), r"vocab.json: not a JSON list of the pieces in id order"),
    (lambda vocab: vocab.write_text('["a", "b"]'), r"vocab.json: lacks the special pieces \['<unk>', '<s>', '</s>'\]"),
    (lambda vocab: vocab.unlink(), r"no vocab.json beside tokenizer_config.json"),
])
def test_a_damaged_word_export_vocabulary_is_named(damage, said, words_kind, tmp_path):
    """A half-copied or edited export: transformers passes on our line naming vocab.json (a damaged .py or
    tokenizer_config.json is read by transformers before any of our code runs: its own error stands)."""
    transformers = pytest.importorskip("transformers")
    if not words_kind.byte_fallback:
        pytest.skip("one tokenizer is enough")
    _word_export(words_kind, tmp_path / "hf")
    damage(tmp_path / "hf" / "vocab.json")
    with pytest.raises(ValueError, match=said + r".*export the model again"):
        transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)


@pytest.mark.slow
def test_word_export_gives_our_ids_on_real_zhoblimp(data_dir, words_kind, tmp_path):
    from babylm_jax.tasks.registry import get_task

    files = get_task("zhoblimp").find_files(data_dir)
    sentences = _pair_sentences(files, every=10)
    assert len(files) == 118 and len(sentences) >= 7000
    hf = _word_export(words_kind, tmp_path / "hf")
    assert [hf(t, add_special_tokens=False)["input_ids"] for t in sentences] == [words_kind.encode(t) for t in sentences]


# Every kind of the table (corpus.tokenizer_kinds.KINDS): trained on texts and on the corpus cache as prepare trains
# it, saved, loaded back with the same ids, exported; and a fixture kind added by one entry in each table.

PROBE = ["我们今天去公园。", "龘😀 abc 123", ""]


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    from babylm_jax.config.schema import RunConfig
    from babylm_jax.corpus.corpus_cache import count_corpus
    from fixtures.data import synthetic

    root = tmp_path_factory.mktemp("kinds")
    run = RunConfig.from_config(synthetic.tiny_config(synthetic.write_txt_corpus(root / "corpus", 60)))
    corpus = count_corpus(run.data, root / "data")
    return list(corpus.iter_texts()), corpus


def _kind_round_trip(kind, tiny_corpus, tmp_path):
    transformers = pytest.importorskip("transformers")
    texts, corpus = tiny_corpus
    config = TokenizerConfig(kind=kind, byte_fallback=True, character_coverage=1.0, min_char_count=1,
                             required_characters="", training_sentences=1000)
    entry = tokenizer_kinds.KINDS[kind]
    on_texts = tokenizer_kinds.train_tokenizer(texts, config, 400)
    on_corpus = entry.from_corpus(corpus, corpus.char_counts(), config, 400, ())
    for name, trained in (("texts", on_texts), ("corpus", on_corpus)):
        assert isinstance(trained, entry.tokenizer) and trained.kind == kind, name
        trained.save(tmp_path / name)
        loaded = tokenizer_kinds.load_tokenizer(tmp_path / name)
        assert type(loaded) is type(trained) and loaded.kind == kind
        assert [loaded.encode(t) for t in texts[:20] + PROBE] == [trained.encode(t) for t in texts[:20] + PROBE]
        exported = tmp_path / f"hf-{name}"
        exported.mkdir()
        for file_name, text in fast_tokenizer.tokenizer_texts(loaded, "causal", max_len=64).items():
            (exported / file_name).write_text(text, encoding="utf-8")
        hf = transformers.AutoTokenizer.from_pretrained(exported, trust_remote_code=True)
        assert hf.is_fast == (fast_tokenizer.EXPORTS[kind].fast is not None)
        assert [hf(t, add_special_tokens=False)["input_ids"] for t in texts[:20] + PROBE] \
            == [loaded.encode(t) for t in texts[:20] + PROBE]


def test_the_kinds_config_checks_are_the_table_and_every_kind_exports():
    from babylm_jax.config.data import TOKENIZER_KINDS

    assert tuple(tokenizer_kinds.KINDS) == TOKENIZER_KINDS
    assert tuple(fast_tokenizer.EXPORTS) == TOKENIZER_KINDS


@pytest.mark.parametrize("kind", list(tokenizer_kinds.KINDS))
def test_every_kind_trains_saves_loads_and_exports(kind, tiny_corpus, tmp_path):
    _kind_round_trip(kind, tiny_corpus, tmp_path)


def _train_code_points(texts, config, vocab_size, required=()):
    """The fixture kind's training: every character of `texts` in code-point order, as many as `vocab_size` allows."""
    characters = sorted(set(itertools.chain.from_iterable(texts)))
    return CodePointTokenizer(characters[:vocab_size - tokenizer_training.reserved_ids(config.byte_fallback)],
                              config.byte_fallback)


class CodePointTokenizer(tok.CharTokenizer):
    """The fixture kind "code_points": a character vocabulary in code-point order (a char tokenizer's files)."""

    kind = "code_points"


@pytest.fixture
def code_points(monkeypatch):
    """The fixture kind, added by its name, its entry and its export (a char tokenizer's)."""
    from babylm_jax.config import data

    monkeypatch.setattr(data, "TOKENIZER_KINDS", (*data.TOKENIZER_KINDS, "code_points"))
    monkeypatch.setitem(tokenizer_kinds.KINDS, "code_points", tokenizer_kinds.TokenizerKind(
        CodePointTokenizer, _train_code_points,
        lambda corpus, char_counts, config, vocab_size, required: _train_code_points(char_counts, config, vocab_size)))
    monkeypatch.setitem(fast_tokenizer.EXPORTS, "code_points", fast_tokenizer.EXPORTS["char"])


def test_a_kind_is_its_entries(code_points, tiny_corpus, tmp_path, monkeypatch):
    from babylm_jax.config import data
    from babylm_jax.config.schema import default_config

    config = default_config().data
    config.tokenizer.kind = "code_points"
    data.DataConfig.from_config(config)
    _kind_round_trip("code_points", tiny_corpus, tmp_path)
    monkeypatch.setattr(data, "TOKENIZER_KINDS", data.TOKENIZER_KINDS[:-1])
    with pytest.raises(ValueError, match="config key data.tokenizer.kind: 'code_points' is not one of"):
        data.DataConfig.from_config(config)
