"""Per-token labels of the auxiliary character heads: syllable with tone, tone, initial, final, radical.

    table_VxF = label_table(pieces)   # [V, len(AUX_HEADS)] int32, IGNORE where a token has no label

Built once per vocabulary from each token's piece. A piece that is one basic-block hanzi (a
SentencePiece piece may carry the word-start mark ▁ before it) gets that character's labels
from `hanzi_lexicon`: pypinyin's default reading (its marked syllable, tone 1-5, initial with
"" for a zero initial, written final) and cnradical's radical. Every other piece (special
tokens, punctuation, Latin letters, byte pieces, radicals outside the basic block, BPE pieces
of two or more characters) is IGNORE in every column, so it adds nothing to a head's loss.
The classes of a head are those of the whole basic block (U+4E00-U+9FFF) under the installed
packages, so a head's size does not depend on the corpus or the tokenizer.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from babylm_jax.config.training import AUX_HEADS, AuxHeadsSettings
from babylm_jax.corpus import hanzi_lexicon

IGNORE = -1
_WORD_START = "▁"


def _values(info: hanzi_lexicon.CharInfo) -> tuple:
    r = info.readings[0]
    return r.marked, r.tone, r.initial, r.final, info.radical


@functools.lru_cache(maxsize=1)
def inventories() -> dict[str, tuple]:
    """The sorted classes of each head over the basic block (raises MissingPackageError without the packages)."""
    lexicon = hanzi_lexicon.Lexicon()
    seen: dict[str, set] = {head: set() for head in AUX_HEADS}
    for code in range(hanzi_lexicon.CJK_BASIC[0], hanzi_lexicon.CJK_BASIC[1] + 1):
        info = lexicon.info(chr(code))
        if info is None:
            continue
        for head, value in zip(AUX_HEADS, _values(info)):
            if value is not None:
                seen[head].add(value)
    return {head: tuple(sorted(values)) for head, values in seen.items()}


def head_sizes() -> dict[str, int]:
    return {head: len(classes) for head, classes in inventories().items()}


def piece_character(piece: str) -> str | None:
    """The hanzi a piece is (without a leading ▁), or None."""
    text = piece[1:] if piece.startswith(_WORD_START) else piece
    return text if hanzi_lexicon.is_cjk_basic(text) else None


def label_table(pieces: Sequence[str], rows: int | None = None) -> np.ndarray:
    """[rows or len(pieces), len(AUX_HEADS)] int32 class ids per token id; IGNORE where none."""
    lexicon = hanzi_lexicon.Lexicon()
    index = {head: {c: i for i, c in enumerate(classes)} for head, classes in inventories().items()}
    table = np.full((rows or len(pieces), len(AUX_HEADS)), IGNORE, np.int32)
    for token_id, piece in enumerate(pieces):
        ch = piece_character(piece)
        info = lexicon.info(ch) if ch else None
        if info is None:
            continue
        for column, (head, value) in enumerate(zip(AUX_HEADS, _values(info))):
            table[token_id, column] = index[head].get(value, IGNORE)
    return table


def tokenizer_pieces(tokenizer) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def check_vocabulary(table: np.ndarray, heads: Sequence[str]) -> None:
    """Refuses a head that no token of the vocabulary has a label for, naming its key."""
    for head in heads:
        if not np.any(table[:, AUX_HEADS.index(head)] != IGNORE):
            raise ValueError(
                f"config key train.aux_heads.{head}: the tokenizer has no token that is a hanzi with a "
                f"{head} label; set it to 0 or use a vocabulary with hanzi (data.tokenizer.kind=char)")


def check_head_labels(aux_heads: AuxHeadsSettings, tokenizer) -> None:
    """Before tokenising: every head `train.aux_heads` gives a weight above 0 has labels in this
    tokenizer's vocabulary."""
    heads = [f for f in AUX_HEADS if getattr(aux_heads, f) > 0]
    if heads:
        check_vocabulary(label_table(tokenizer_pieces(tokenizer)), heads)
