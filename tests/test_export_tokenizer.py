"""The exported fast tokenizer reproduces our tokenizer's ids and offsets, and adds special tokens as our scoring does."""
import itertools
import json

import pytest

tokenizers = pytest.importorskip("tokenizers")

from babylm_jax.config.data import TokenizerConfig  # noqa: E402
from babylm_jax.corpus.counting import builtin  # noqa: E402
from babylm_jax.core.registries.families import family_spec  # noqa: E402
from babylm_jax.corpus.tokens import tokenizer as tokenizer_lib  # noqa: E402
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
    return tokenizer_lib.train_tokenizer(texts[0], config, 2600 if required else 2000, REQUIRED if required else ())


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
