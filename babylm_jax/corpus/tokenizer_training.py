"""Training a tokenizer: the characters it must hold, its vocabulary from counts, SentencePiece training.

Each kind trains two ways, the functions its entry in `corpus.tokenizer_kinds.KINDS` holds: on texts
(`train_char`, `train_words`, `train_sentencepiece`), and on the corpus cache as prepare does
(`*_from_corpus`: the character kinds from the counts the cache recorded, SentencePiece on a sample of its lines).
"""
from __future__ import annotations

import collections
import io
import os
import re
from typing import TYPE_CHECKING, Iterable, Sequence

import sentencepiece as spm

from babylm_jax.config.data import PARTS_SETTING
from babylm_jax.core.progress import elapsed
from babylm_jax.core.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, SPECIAL_PIECES, UNK_ID
from babylm_jax.corpus.hanzi_lexicon import CJK_BASIC
from babylm_jax.corpus.tokenizer import NUM_BYTES, CharTokenizer, SentencePieceTokenizer, WordTokenizer

if TYPE_CHECKING:
    from babylm_jax.config.data import TokenizerConfig
    from babylm_jax.corpus.corpus_cache import CorpusCache

CJK_UNIFIED = (CJK_BASIC, (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2EBEF), (0x30000, 0x323AF))
CHINESE_PUNCTUATION = "，。、；：？！“”‘’（）《》…—·"  # required with any set: the hanzi tasks quote characters


def is_cjk_unified(ch: str) -> bool:
    """A CJK Unified Ideograph (the basic block or extensions A-H)."""
    code = ord(ch)
    return any(low <= code <= high for low, high in CJK_UNIFIED)


def required_characters(setting: str, counts: dict[str, int]) -> list[str]:
    """Characters the tokenizer must hold as pieces of their own (`data.tokenizer.required_characters`).

    "corpus_cjk": every CJK Unified Ideograph in `counts` (the corpus); "cjk_basic": those and
    the whole basic block U+4E00-U+9FFF; "corpus_cjk_parts": corpus_cjk and the radical and parts
    of each of those hanzi and the 329 symbols of the radical blocks (`part_symbols`). All add
    CHINESE_PUNCTUATION. Most frequent first, then by code point. `setting` is one of
    config.data.REQUIRED_CHARACTERS (checked by `config.data`).
    """
    if not setting:
        return []
    chars = {c for c in counts if is_cjk_unified(c)} | set(CHINESE_PUNCTUATION)
    if setting == "cjk_basic":
        chars.update(map(chr, range(CJK_BASIC[0], CJK_BASIC[1] + 1)))
    if setting == PARTS_SETTING:
        chars.update(part_symbols(chars))
    return sorted(chars, key=lambda c: (-counts.get(c, 0), c))


def part_symbols(characters: Iterable[str]) -> set[str]:
    """Radicals and parts of `characters` and the radical-block symbols (the `hanzi` extra's lexicon)."""
    from babylm_jax.corpus.hanzi_lexicon import components  # the lexicon's packages only when asked for

    return components(characters)


def reserved_ids(byte_fallback: bool) -> int:
    """Ids every tokenizer holds before its pieces: the special ones, and the 256 bytes with byte fallback."""
    return len(SPECIAL_PIECES) + (NUM_BYTES if byte_fallback else 0)


def check_vocab_room(required: Sequence[str], vocab_size: int, reserved: int) -> None:
    """Refuses a `vocab_size` without an id for each `required` character beside the `reserved` ones."""
    if len(required) + reserved > vocab_size:
        raise ValueError(
            f"data.tokenizer.required_characters needs {len(required):,} character ids plus {reserved} reserved, "
            f"more than model.vocab_size={vocab_size:,}; raise model.vocab_size or choose a smaller set")


def train_char(texts: Iterable[str], config: TokenizerConfig, vocab_size: int, required: Sequence[str] = ()) -> CharTokenizer:
    """The char kind on `texts`: their characters counted; every `required` character gets its own id."""
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(text)
    return char_tokenizer_from_counts(counts, vocab_size, int(config.min_char_count), bool(config.byte_fallback), required)


def train_words(texts: Iterable[str], config: TokenizerConfig, vocab_size: int, required: Sequence[str] = ()) -> WordTokenizer:
    """The words kind on `texts`: their characters and jieba words counted here (prepare reads the counts the
    corpus cache recorded instead, `words_from_corpus`)."""
    from babylm_jax.corpus.segmenter import make_word_lengths

    word_lengths = make_word_lengths(True)[0]
    char_counts: collections.Counter = collections.Counter()
    word_counts: collections.Counter = collections.Counter()
    for text in texts:
        char_counts.update(text)
        start = 0
        for length in word_lengths(text):
            if length > 1:
                word_counts[text[start:start + length]] += 1
            start += length
    return word_tokenizer_from_counts(char_counts, word_counts, vocab_size, int(config.min_char_count),
                                      bool(config.byte_fallback), required)


def char_from_corpus(corpus: CorpusCache, char_counts: dict[str, int], config: TokenizerConfig, vocab_size: int,
                     required: Sequence[str]) -> CharTokenizer:
    """The char kind on the corpus cache: its recorded `char_counts`."""
    return char_tokenizer_from_counts(char_counts, vocab_size, config.min_char_count, config.byte_fallback, required)


def words_from_corpus(corpus: CorpusCache, char_counts: dict[str, int], config: TokenizerConfig, vocab_size: int,
                      required: Sequence[str]) -> WordTokenizer:
    """The words kind on the corpus cache: its recorded `char_counts` and the words its count recorded."""
    return word_tokenizer_from_counts(char_counts, corpus.word_counts(), vocab_size, config.min_char_count,
                                      config.byte_fallback, required)


def sentencepiece_from_corpus(corpus: CorpusCache, char_counts: dict[str, int], config: TokenizerConfig,
                              vocab_size: int, required: Sequence[str]) -> SentencePieceTokenizer:
    """A SentencePiece kind on the corpus cache: trained on `data.tokenizer.training_sentences` of its lines."""
    return train_sentencepiece(tokenizer_training_texts(corpus, config.training_sentences), config, vocab_size, required)


def tokenizer_training_texts(corpus: CorpusCache, limit: int):
    """About `limit` lines spread evenly over the corpus (SentencePiece input)."""
    total_lines = int(corpus.doc_array("doc_lines").sum())
    stride = max(1, total_lines // max(limit, 1))
    index = 0
    for text in corpus.iter_texts():
        for line in text.split("\n"):
            if index % stride == 0:
                yield line
            index += 1


def char_tokenizer_from_counts(
    counts: dict[str, int], vocab_size: int, min_count: int, byte_fallback: bool, required: Sequence[str] = ()
) -> CharTokenizer:
    """The `required` characters, then the most frequent ones seen >= `min_count` times, as many as `vocab_size` allows."""
    reserved = reserved_ids(byte_fallback)
    if vocab_size <= reserved:
        raise ValueError(f"model.vocab_size={vocab_size} leaves no room for characters ({reserved} reserved ids)")
    check_vocab_room(required, vocab_size, reserved)
    must = set(required)
    frequent = sorted((c for c, n in counts.items() if n >= min_count and c not in must), key=lambda c: (-counts[c], c))
    kept = list(dict.fromkeys(required)) + frequent
    if not kept:
        raise ValueError("Character tokenizer: no character occurs data.tokenizer.min_char_count times")
    return CharTokenizer(kept[: vocab_size - reserved], byte_fallback)


def word_tokenizer_from_counts(
    char_counts: dict[str, int], word_counts: dict[str, int], vocab_size: int, min_count: int, byte_fallback: bool,
    required: Sequence[str] = (),
) -> WordTokenizer:
    """The `required` characters, then every character seen >= `min_count` times (most frequent first), then
    the most frequent words of two or more characters seen >= `min_count` times, as many as `vocab_size` allows.

    Characters come first so that every character of the corpus keeps an id of its own (the hanzi tasks quote
    single characters); `min_count` above 1 leaves rare characters to byte pieces and their ids to words.
    """
    characters = char_tokenizer_from_counts(char_counts, vocab_size, min_count, byte_fallback, required).characters
    room = vocab_size - reserved_ids(byte_fallback) - len(characters)
    if room <= 0:
        raise ValueError(
            f"data.tokenizer.kind='words': model.vocab_size={vocab_size:,} leaves no id for a word after "
            f"{len(characters):,} characters and {reserved_ids(byte_fallback)} reserved ids; raise model.vocab_size "
            "or data.tokenizer.min_char_count")
    taken = set(characters)
    words = sorted((w for w, n in word_counts.items() if n >= min_count and len(w) > 1 and w not in taken),
                   key=lambda w: (-word_counts[w], w))
    return WordTokenizer(characters + words[:room], byte_fallback)


def _sentencepiece_fix(message: str) -> str:
    """The way on from a SentencePiece training error: its vocabulary too large for the text, or else too small."""
    most = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", message)
    if most:
        return (f"The text it trained on holds at most {most.group(1)} pieces: set model.vocab_size to at most "
                f"{most.group(1)}, or give it more text (data.tokenizer.training_sentences, a larger corpus)")
    return "Lower data.tokenizer.character_coverage or raise model.vocab_size."


def train_sentencepiece(texts: Iterable[str], config: TokenizerConfig, vocab_size: int,
                        required: Sequence[str] = ()) -> SentencePieceTokenizer:
    """`config.kind` ("unigram" or "bpe", SentencePiece's model type) on `texts`; every `required` character gets its own id."""
    check_vocab_room(required, vocab_size, reserved_ids(config.byte_fallback))
    # radicals and parts as user symbols: pieces of their own, never merged into longer pieces
    symbols = part_symbols(required) & set(required) if getattr(config, "required_characters", "") == PARTS_SETTING else set()
    model = io.BytesIO()
    sentences = (t for t in texts if t.strip())
    try:
        with elapsed(f"SentencePiece: training {config.kind}, vocab {vocab_size:,}"):
            spm.SentencePieceTrainer.train(
                sentence_iterator=sentences,
                model_writer=model,
                vocab_size=vocab_size,
                model_type=config.kind,
                character_coverage=float(config.character_coverage),
                byte_fallback=bool(config.byte_fallback),
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                control_symbols=list(SPECIAL_PIECES[MASK_ID:]),
                normalization_rule_name="identity",
                add_dummy_prefix=False,
                remove_extra_whitespaces=False,
                split_digits=True,
                required_chars="".join(c for c in required if c not in symbols),
                user_defined_symbols=sorted(symbols),
                max_sentence_length=1 << 16,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
    except RuntimeError as e:
        raise ValueError(f"SentencePiece training failed for data.tokenizer.kind={config.kind!r}, "
                         f"model.vocab_size={vocab_size}: {e}. {_sentencepiece_fix(str(e))}") from e
    return SentencePieceTokenizer(model.getvalue(), config.kind, bool(config.byte_fallback))
