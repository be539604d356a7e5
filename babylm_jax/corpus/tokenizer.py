"""Tokenizers behind one interface: SentencePiece (unigram/BPE), character-level, and jieba words.

Special ids are fixed for every tokenizer: pad=0, unk=1, bos=2, eos=3, mask=4, cls=5, sep=6.
`unk_id` is None when the tokenizer can never emit UNK (byte fallback on); id 1 stays
reserved either way. `save(directory)` writes `tokenizer.json` (with "kind") plus the model
file; the class's `from_saved` reads the model file back (`corpus.tokenizer_kinds.load_tokenizer`
finds the class by the kind). Training one is `corpus/tokenizer_training.py`.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import pathlib
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from babylm_jax.core.atomic import atomic_write_bytes
from babylm_jax.core.jsonl import read_json
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_PIECES, UNK_ID

NUM_BYTES = 256


def _byte_piece(b: int) -> str:
    return f"<0x{b:02X}>"


def _offsets_from_advance(advance_T: np.ndarray, is_continuation_T: np.ndarray,
                          doc_lengths_D: np.ndarray | None = None) -> np.ndarray:
    """Character spans from per-token character advances; byte pieces of one character share its span.
    With `doc_lengths_D` the tokens are several documents' in a row, each counted from its own start."""
    end_T = np.cumsum(advance_T)
    if doc_lengths_D is not None:
        before_D = np.concatenate([[0], end_T])[np.cumsum(doc_lengths_D) - doc_lengths_D]
        end_T -= np.repeat(before_D, doc_lengths_D)
    start_T = end_T - advance_T
    # Byte pieces: a lead byte opens a character (advance 1); continuation bytes advance 0
    # and point back at the character just opened.
    start_T = np.where(is_continuation_T, end_T - 1, start_T)
    end_T = np.where(is_continuation_T | (advance_T == 1), start_T + 1, end_T)
    return np.stack([start_T, end_T], axis=-1)


class Tokenizer:
    """Common interface; subclasses implement `encode`, `decode`, `id_to_piece`, `_save_model`, `from_saved`."""

    kind: str
    vocab_size: int
    byte_fallback: bool
    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    mask_id = MASK_ID
    cls_id = CLS_ID
    sep_id = SEP_ID

    @property
    def unk_id(self) -> int | None:
        return None if self.byte_fallback else UNK_ID

    @property
    def special_ids(self) -> tuple[int, ...]:
        ids = (PAD_ID, UNK_ID, BOS_ID, EOS_ID, MASK_ID, CLS_ID, SEP_ID)
        return tuple(i for i in ids if i != UNK_ID or self.unk_id is not None)

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each token's character span [start, end) in `text`."""
        ids = self.encode(text)
        return ids, [tuple(span) for span in self.offsets_array(text, ids).tolist()]

    def offsets_array(self, text: str, ids: Sequence[int]) -> np.ndarray:
        """[T, 2] int64 character spans of `ids = encode(text)`; byte pieces share their character's span."""
        ids_T = np.asarray(ids, dtype=np.int64)
        return _offsets_from_advance(self._advance[ids_T], self._continuation[ids_T])

    def offsets_batch(self, texts: Sequence[str], ids_per_text: Sequence[Sequence[int]]) -> np.ndarray:
        """[sum T, 2]: `offsets_array` of every text, one after another, in one pass where the pieces'
        advances give them (each text's spans count from its own start)."""
        lengths_D = np.fromiter(map(len, ids_per_text), np.int64, count=len(ids_per_text))
        ids_T = np.fromiter(itertools.chain.from_iterable(ids_per_text), np.int64, count=int(lengths_D.sum()))
        spans_Tx2 = _offsets_from_advance(self._advance[ids_T], self._continuation[ids_T], lengths_D)
        starts_D = np.cumsum(lengths_D) - lengths_D
        for d, (text, ids) in enumerate(zip(texts, ids_per_text)):
            if not self.advances_give_offsets(ids):
                spans_Tx2[starts_D[d]:starts_D[d] + len(ids)] = self.offsets_array(text, ids)
        return spans_Tx2

    def advances_give_offsets(self, ids: Sequence[int]) -> bool:
        """Whether the pieces' character advances give the spans of `ids` (else `offsets_array` reads them)."""
        return True

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def id_to_piece(self, i: int) -> str:
        raise NotImplementedError

    def _save_model(self, directory: pathlib.Path) -> dict:
        raise NotImplementedError

    @classmethod
    def from_saved(cls, model_path: pathlib.Path, meta: dict, fix: str) -> Tokenizer:
        """The tokenizer `save` wrote: its model file and tokenizer.json's `meta` (`fix` says how to mend a bad file)."""
        raise NotImplementedError

    def save(self, directory: str | os.PathLike) -> None:
        """Writes tokenizer.json and the model file atomically into `directory`."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, "byte_fallback": self.byte_fallback}
        meta.update(self._save_model(directory))
        atomic_write_bytes(directory / "tokenizer.json", json.dumps(meta, ensure_ascii=False, indent=1).encode())

    def _build_offset_tables(self, pieces: Sequence[str]) -> None:
        advance, continuation = np.zeros(len(pieces), np.int64), np.zeros(len(pieces), bool)
        for i, piece in enumerate(pieces):
            if i < len(SPECIAL_PIECES):
                advance[i] = 1 if i == UNK_ID else 0
            elif self.byte_fallback and _is_byte_piece(piece):
                byte = int(piece[3:5], 16)
                continuation[i] = (byte & 0xC0) == 0x80
                advance[i] = 0 if continuation[i] else 1
            else:
                advance[i] = len(piece)
        self._advance, self._continuation = advance, continuation


def vocabulary_record(tokenizer: Tokenizer) -> dict:
    """What a checkpoint keeps of the tokenizer it was trained with: its kind, its number of ids and a
    fingerprint (sha256, 16 hex digits) of its pieces in id order: a tokenizer that gives any piece
    another id has another fingerprint, wherever and however its files were written."""
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    text = json.dumps([tokenizer.kind, tokenizer.byte_fallback, pieces], ensure_ascii=False)
    return {"kind": tokenizer.kind, "ids": tokenizer.vocab_size,
            "fingerprint": hashlib.sha256(text.encode()).hexdigest()[:16]}


def describe_vocabulary(record: dict) -> str:
    """'a char tokenizer of 1,881 ids (vocabulary 3fa2c19e0b7d4a51)'."""
    return f"a {record['kind']} tokenizer of {record['ids']:,} ids (vocabulary {record['fingerprint']})"


def _is_byte_piece(piece: str) -> bool:
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece unigram or BPE, identity normalisation (offsets match the input text)."""

    def __init__(self, model_proto: bytes, kind: str, byte_fallback: bool):
        self.kind, self.byte_fallback = kind, byte_fallback
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.vocab_size = self._sp.get_piece_size()
        pieces = [self._sp.id_to_piece(i) for i in range(self.vocab_size)]
        self._build_offset_tables([p.replace("\u2581", " ") for p in pieces])

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts))

    def offsets_array(self, text: str, ids: Sequence[int]) -> np.ndarray:
        if self.advances_give_offsets(ids):
            return super().offsets_array(text, ids)
        return self._proto_offsets(text)

    def advances_give_offsets(self, ids: Sequence[int]) -> bool:
        return self.byte_fallback or UNK_ID not in ids

    def _proto_offsets(self, text: str) -> np.ndarray:
        """Slow exact path (UNK may cover several characters): byte offsets -> characters."""
        proto = self._sp.encode(text, out_type="proto")
        char_of_byte = np.zeros(len(text.encode("utf-8")) + 1, np.int64)
        position = 0
        for c, ch in enumerate(text):
            n = len(ch.encode("utf-8"))
            char_of_byte[position : position + n] = c
            position += n
        char_of_byte[position] = len(text)
        spans = [(p.begin, p.end) for p in proto.pieces]
        return char_of_byte[np.asarray(spans, dtype=np.int64).reshape(-1, 2)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    def _save_model(self, directory: pathlib.Path) -> dict:
        atomic_write_bytes(directory / "spm.model", self._proto)
        return {"model_file": "spm.model"}

    @classmethod
    def from_saved(cls, model_path: pathlib.Path, meta: dict, fix: str) -> SentencePieceTokenizer:
        if not model_path.is_file():
            raise FileNotFoundError(f"{model_path}: file not found; {fix}")
        return cls(model_path.read_bytes(), meta["kind"], meta["byte_fallback"])


class CharTokenizer(Tokenizer):
    """One id per character seen often enough; others become UNK or UTF-8 byte pieces."""

    kind = "char"

    def __init__(self, characters: Sequence[str], byte_fallback: bool):
        self.byte_fallback = byte_fallback
        self.characters = list(characters)
        pieces = list(SPECIAL_PIECES)
        if byte_fallback:
            pieces += [_byte_piece(b) for b in range(NUM_BYTES)]
        self._first_char_id = len(pieces)
        pieces += self.characters
        self._pieces = pieces
        self._char_to_id = {c: i + self._first_char_id for i, c in enumerate(self.characters)}
        self.vocab_size = len(pieces)
        self._build_offset_tables(pieces)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        lookup = self._char_to_id
        for ch in text:
            i = lookup.get(ch)
            if i is not None:
                ids.append(i)
            elif self.byte_fallback:
                ids.extend(len(SPECIAL_PIECES) + b for b in ch.encode("utf-8"))
            else:
                ids.append(UNK_ID)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        pending = bytearray()
        first_byte, end_byte = len(SPECIAL_PIECES), len(SPECIAL_PIECES) + NUM_BYTES
        for i in ids:
            i = int(i)
            if self.byte_fallback and first_byte <= i < end_byte:
                pending.append(i - first_byte)
                continue
            if pending:
                out.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
            if i >= self._first_char_id:
                out.append(self._pieces[i])
            elif i == UNK_ID:
                out.append(" \u2047 ")
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def id_to_piece(self, i: int) -> str:
        return self._pieces[int(i)]

    def _save_model(self, directory: pathlib.Path) -> dict:
        atomic_write_bytes(directory / "chars.json", json.dumps(self.characters, ensure_ascii=False).encode())
        return {"model_file": "chars.json"}

    @classmethod
    def from_saved(cls, model_path: pathlib.Path, meta: dict, fix: str) -> CharTokenizer:
        """Also the words kind's: its pieces file is read as the characters file is."""
        return cls(read_json(model_path, fix), meta["byte_fallback"])


class WordTokenizer(CharTokenizer):
    """Pieces that never cross a jieba word boundary.

    Text is cut as jieba 0.42.1's default mode cuts it (the words the budget counts; the faster exact
    segmenter where rjieba is installed, `corpus/segmenter.py`). A word with an id of its own is
    one token; any other word is cut from the left into the longest pieces the vocabulary holds, down
    to single characters, and a character without an id becomes UTF-8 byte pieces (byte fallback) or
    UNK. The vocabulary is characters and words alike (`pieces`), looked up whole.
    """

    kind = "words"
    _MEMO_ENTRIES = 1 << 20  # words remembered with their ids (a full table is emptied: ids never change)

    def __init__(self, pieces: Sequence[str], byte_fallback: bool):
        super().__init__(pieces, byte_fallback)
        self._longest = max(map(len, self.characters), default=1)
        self._word_lengths = None
        self._memo: dict[str, tuple[int, ...]] = {}

    def word_lengths(self, text: str) -> list[int]:
        """The length of each word of `jieba.cut(text)`, in order."""
        if self._word_lengths is None:
            from babylm_jax.corpus.segmenter import make_word_lengths

            self._word_lengths = make_word_lengths(True)[0]
        return self._word_lengths(text)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        start, memo = 0, self._memo
        for length in self.word_lengths(text):
            word = text[start:start + length]
            start += length
            word_ids = memo.get(word)
            if word_ids is None:
                if len(memo) >= self._MEMO_ENTRIES:
                    memo.clear()
                word_ids = memo[word] = tuple(self.encode_word(word))
            ids += word_ids
        return ids

    def encode_word(self, word: str) -> list[int]:
        """One word's ids: itself, else its longest known pieces from the left, down to characters."""
        lookup, ids, i = self._char_to_id, [], 0
        while i < len(word):
            for j in range(min(len(word), i + self._longest), i, -1):
                piece_id = lookup.get(word[i:j])
                if piece_id is not None:
                    ids.append(piece_id)
                    i = j
                    break
            else:
                ids += super().encode(word[i])  # a character without an id: byte pieces or UNK
                i += 1
        return ids

    def _save_model(self, directory: pathlib.Path) -> dict:
        atomic_write_bytes(directory / "pieces.json", json.dumps(self.characters, ensure_ascii=False).encode())
        return {"model_file": "pieces.json", "segmentation": "jieba 0.42.1, default mode (jieba.cut)"}

