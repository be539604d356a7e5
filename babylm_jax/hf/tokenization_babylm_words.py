"""The tokenizer of a babylm_jax model trained with `data.tokenizer.kind="words"`, for transformers.

Shipped with the export (tokenizer_config.json's auto_map), so that
`AutoTokenizer.from_pretrained(path, trust_remote_code=True)` gives the ids the model trained on:
text is cut into words with jieba 0.42.1's default mode (`jieba.cut`); a word the vocabulary holds is
one token, any other word is cut from the left into the longest pieces the vocabulary holds, down to
single characters; a character without an id becomes its UTF-8 byte pieces (`<0xE9>`; byte fallback)
or `<unk>`. Pieces never cross a word boundary. A text is framed as the model's family trains
(`opener text closer`, pairs `opener a closer b closer`). Special pieces written in the text ("<s>",
"[MASK]") are read as special tokens. `return_offsets_mapping=True` gives each token's (start, end)
in its text, as a fast tokenizer does ((0, 0) for the framing and padding; a character's byte pieces
all span that character): the official pipeline's minimal-pair scorer asks for them. Needs jieba, not
torch. This file stands alone: it imports nothing of babylm_jax.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

from transformers import BatchEncoding, PreTrainedTokenizer

JIEBA_VERSION = "0.42.1"  # the segmentation the model trained with (the challenge's word count)
VOCAB_FILE = "vocab.json"  # every piece, in id order
_BYTE_PIECES = 256
_NUM_SPECIAL = 7  # pad, unk, bos, eos, mask, cls, sep: ids 0-6


def _import_jieba():
    """jieba, its dictionary loaded quietly, or an ImportError that says how to get it."""
    try:
        import jieba
    except ImportError as error:
        raise ImportError(
            "BabyLMWordTokenizer cuts text into words with jieba, which is not installed: "
            f"pip install jieba=={JIEBA_VERSION}") from error
    if getattr(jieba, "__version__", JIEBA_VERSION) != JIEBA_VERSION:
        logging.getLogger(__name__).warning(
            "jieba %s is installed; this model's words are jieba %s's (pip install jieba==%s): other versions may "
            "cut some texts differently", jieba.__version__, JIEBA_VERSION, JIEBA_VERSION)
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def _read_pieces(vocab_file: Optional[str]) -> list[str]:
    """Every piece of `vocab_file` (vocab.json) in id order; an error naming the file where it is missing or
    damaged (a half-copied or edited export), instead of the JSON reader's line that names none."""
    if vocab_file is None:  # a ValueError: transformers words an OSError here as its own, naming no file
        raise ValueError(f"BabyLMWordTokenizer: no {VOCAB_FILE} beside tokenizer_config.json; export the model again")
    try:
        with open(vocab_file, encoding="utf-8") as f:
            pieces = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{vocab_file}: damaged ({type(error).__name__}: {error}); export the model again") from None
    if not isinstance(pieces, list) or not all(isinstance(piece, str) for piece in pieces):
        raise ValueError(f"{vocab_file}: not a JSON list of the pieces in id order; export the model again")
    return pieces


class BabyLMWordTokenizer(PreTrainedTokenizer):
    """jieba words whole where the vocabulary holds them, else their longest known pieces (see the module)."""

    vocab_files_names = {"vocab_file": VOCAB_FILE}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file: str, byte_fallback: bool = True, frame_opener: str = "<s>",
                 frame_closer: str = "</s>", **kwargs):
        self._jieba = _import_jieba()
        self._pieces = _read_pieces(vocab_file)
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        unknown = [str(piece) for piece in (kwargs.get("unk_token", "<unk>"), frame_opener, frame_closer)
                   if str(piece) not in self._ids]
        if unknown:
            raise ValueError(f"{vocab_file}: lacks the special pieces {unknown} that tokenizer_config.json names; "
                             "the export is damaged or mixed: export the model again")
        self.byte_fallback = bool(byte_fallback)
        first_piece = _NUM_SPECIAL + (_BYTE_PIECES if self.byte_fallback else 0)
        self._word_ids = {piece: i for i, piece in enumerate(self._pieces) if i >= first_piece}
        self._longest = max(map(len, self._word_ids), default=1)
        self.frame_opener, self.frame_closer = frame_opener, frame_closer
        super().__init__(byte_fallback=byte_fallback, frame_opener=frame_opener, frame_closer=frame_closer, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def get_vocab(self) -> dict[str, int]:
        return {**self._ids, **self.added_tokens_encoder}

    def __call__(self, text=None, text_pair=None, *args, return_offsets_mapping: bool = False,
                 return_tensors=None, **kwargs) -> BatchEncoding:
        """As PreTrainedTokenizer's, and with `return_offsets_mapping` each token's span in its text: one span per
        id in every call form (framed or not, padded or not), and tensors shaped as the ids' (a single text's
        with a batch axis), as a fast tokenizer gives them."""
        encoding = super().__call__(text, text_pair, *args, return_tensors=None if return_offsets_mapping else
                                    return_tensors, **kwargs)
        if not return_offsets_mapping:
            return encoding
        if kwargs.get("is_split_into_words") or kwargs.get("truncation") not in (None, False, "do_not_truncate"):
            raise NotImplementedError("BabyLMWordTokenizer gives offsets for whole, untruncated texts only")
        batched = not isinstance(text, str)
        texts, pairs = ([text], [text_pair]) if not batched else (list(text), list(text_pair or [None] * len(text)))
        ids = encoding["input_ids"] if batched else [encoding["input_ids"]]
        framed = kwargs.get("add_special_tokens", True)
        side = kwargs.get("padding_side") or self.padding_side
        offsets = [self._framed_offsets(a, b, len(row), framed, side) for a, b, row in zip(texts, pairs, ids)]
        encoding["offset_mapping"] = offsets if batched else offsets[0]
        return BatchEncoding(encoding.data, tensor_type=return_tensors, prepend_batch_axis=not batched)

    def _framed_offsets(self, text: str, pair: Optional[str], length: int, framed: bool,
                        side: str) -> list[tuple[int, int]]:
        """The spans of a text or pair, framed or not, padded on `side` to `length`: (0, 0) for what is not text."""
        edge = [(0, 0)] if framed else []
        spans = [*edge, *self.token_offsets(text), *edge]
        if pair is not None:
            spans += [*self.token_offsets(pair), *edge]
        padding = [(0, 0)] * (length - len(spans))
        return padding + spans if side == "left" else spans + padding

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) in `text` of each token of `tokenize(text)`; a byte piece spans its whole character."""
        tokens, spans, cursor, i = self.tokenize(text), [], 0, 0
        while i < len(tokens):
            if self.byte_fallback and _is_byte_piece(tokens[i]):
                j = i
                while j < len(tokens) and _is_byte_piece(tokens[j]):
                    j += 1
                group = bytes(int(t[3:5], 16) for t in tokens[i:j])
                k = 0
                while k < len(group):  # one character's bytes at a time (its UTF-8 lead byte says how many)
                    n = min(_utf8_length(group[k]), len(group) - k)
                    start = text.find(group[k:k + n].decode("utf-8", errors="replace"), cursor)
                    start = cursor if start < 0 else start
                    cursor = start + 1
                    spans += [(start, cursor)] * n
                    k += n
                i = j
                continue
            surface = text[cursor:cursor + 1] if tokens[i] == self.unk_token else tokens[i]
            start = text.find(surface, cursor)
            if start < 0:
                raise ValueError(f"BabyLMWordTokenizer: token {tokens[i]!r} not found in {text!r} after {cursor}")
            cursor = start + len(surface)
            spans.append((start, cursor))
            i += 1
        return spans

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        pieces: list[str] = []
        for word in self._jieba.cut(text):
            pieces += self._word_pieces(word)
        return pieces

    def _word_pieces(self, word: str) -> list[str]:
        """The word itself, else its longest known pieces from the left, down to characters (then bytes or UNK)."""
        pieces, i = [], 0
        while i < len(word):
            for j in range(min(len(word), i + self._longest), i, -1):
                if word[i:j] in self._word_ids:
                    pieces.append(word[i:j])
                    i = j
                    break
            else:
                if self.byte_fallback:
                    pieces += [f"<0x{b:02X}>" for b in word[i].encode("utf-8")]
                else:
                    pieces.append(self.unk_token)
                i += 1
        return pieces

    def _convert_token_to_id(self, token: str) -> int:
        return self._ids.get(token, self._ids[self.unk_token])

    def _convert_id_to_token(self, index: int) -> str:
        return self._pieces[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        out, pending = [], bytearray()
        for token in tokens:
            if self.byte_fallback and _is_byte_piece(token):
                pending.append(int(token[3:5], 16))
                continue
            if pending:
                out.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
            out.append(token)
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def build_inputs_with_special_tokens(self, token_ids_0: list[int], token_ids_1: Optional[list[int]] = None) -> list[int]:
        opener, closer = self._ids[self.frame_opener], self._ids[self.frame_closer]
        ids = [opener, *token_ids_0, closer]
        return ids if token_ids_1 is None else ids + [*token_ids_1, closer]

    def get_special_tokens_mask(self, token_ids_0: list[int], token_ids_1: Optional[list[int]] = None,
                                already_has_special_tokens: bool = False) -> list[int]:
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        mask = [1] + [0] * len(token_ids_0) + [1]
        return mask if token_ids_1 is None else mask + [0] * len(token_ids_1) + [1]

    def create_token_type_ids_from_sequences(self, token_ids_0: list[int],
                                             token_ids_1: Optional[list[int]] = None) -> list[int]:
        return [0] * len(self.build_inputs_with_special_tokens(token_ids_0, token_ids_1))

    def save_vocabulary(self, save_directory: str, filename_prefix: Optional[str] = None) -> tuple[str]:
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILE)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self._pieces, f, ensure_ascii=False)
        return (path,)


def _is_byte_piece(token: str) -> bool:
    """Whether `token` is a byte-fallback piece such as "<0xE9>"."""
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">")


def _utf8_length(lead: int) -> int:
    """The bytes of the UTF-8 character that starts with byte `lead` (1 for a stray continuation byte)."""
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1
