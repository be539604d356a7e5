"""Per-token labels of the auxiliary character heads: syllable with tone, tone, initial, final, radical.

    table_VxF = label_table(pieces)   # [V, len(FAMILIES)] int32, IGNORE where a token has no label

Built once per vocabulary from each token's piece. A piece that is one basic-block hanzi (a
SentencePiece piece may carry the word-start mark ▁ before it) gets that character's labels
from `hanzi_lexicon`: pypinyin's default reading (its marked syllable, tone 1-5, initial with
"" for a zero initial, written final) and cnradical's radical. Every other piece (special
tokens, punctuation, Latin letters, byte pieces, radicals outside the basic block, BPE pieces
of two or more characters) is IGNORE in every column, so it adds nothing to a head's loss.
The classes of a family are those of the whole basic block (U+4E00-U+9FFF) under the installed
packages, so a head's size does not depend on the corpus or the tokenizer.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from babylm_jax.config.training import AUX_HEADS, AuxHeadsSettings
from babylm_jax.corpus.hanzi import hanzi_lexicon

FAMILIES = AUX_HEADS  # the heads, in order (config.train holds the enum)
IGNORE = -1
_WORD_START = "▁"


def _values(info: hanzi_lexicon.CharInfo) -> tuple:
    r = info.readings[0]
    return r.marked, r.tone, r.initial, r.final, info.radical


@functools.lru_cache(maxsize=1)
def inventories() -> dict[str, tuple]:
    """The sorted classes of each family over the basic block (raises MissingExtraError without the packages)."""
    lexicon = hanzi_lexicon.Lexicon()
    seen: dict[str, set] = {family: set() for family in FAMILIES}
    for code in range(hanzi_lexicon.CJK_BASIC[0], hanzi_lexicon.CJK_BASIC[1] + 1):
        info = lexicon.info(chr(code))
        if info is None:
            continue
        for family, value in zip(FAMILIES, _values(info)):
            if value is not None:
                seen[family].add(value)
    return {family: tuple(sorted(values)) for family, values in seen.items()}


def head_sizes() -> dict[str, int]:
    return {family: len(classes) for family, classes in inventories().items()}


def piece_character(piece: str) -> str | None:
    """The hanzi a piece is (without a leading ▁), or None."""
    text = piece[1:] if piece.startswith(_WORD_START) else piece
    return text if hanzi_lexicon.is_cjk_basic(text) else None


def label_table(pieces: Sequence[str], rows: int | None = None) -> np.ndarray:
    """[rows or len(pieces), len(FAMILIES)] int32 class ids per token id; IGNORE where none."""
    lexicon = hanzi_lexicon.Lexicon()
    index = {family: {c: i for i, c in enumerate(classes)} for family, classes in inventories().items()}
    table = np.full((rows or len(pieces), len(FAMILIES)), IGNORE, np.int32)
    for token_id, piece in enumerate(pieces):
        ch = piece_character(piece)
        info = lexicon.info(ch) if ch else None
        if info is None:
            continue
        for column, (family, value) in enumerate(zip(FAMILIES, _values(info))):
            table[token_id, column] = index[family].get(value, IGNORE)
    return table


def tokenizer_pieces(tokenizer) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def check_vocabulary(table: np.ndarray, families: Sequence[str]) -> None:
    """Refuses a head whose family no token of the vocabulary has a label for, naming its key."""
    for family in families:
        if not np.any(table[:, FAMILIES.index(family)] != IGNORE):
            raise ValueError(
                f"config key train.aux_heads.{family}: the tokenizer has no token that is a hanzi with a "
                f"{family} label; set it to 0 or use a vocabulary with hanzi (data.tokenizer.kind=char)")


def check_head_labels(aux_heads: AuxHeadsSettings, tokenizer) -> None:
    """Before tokenising: every head `train.aux_heads` gives a weight above 0 has labels in this
    tokenizer's vocabulary."""
    families = [f for f in FAMILIES if getattr(aux_heads, f) > 0]
    if families:
        check_vocabulary(label_table(tokenizer_pieces(tokenizer)), families)
