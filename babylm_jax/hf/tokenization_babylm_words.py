"""The tokenizer of a babylm_jax model trained with `data.tokenizer.kind="words"`, for transformers.

Shipped with the export (tokenizer_config.json's auto_map), so that
`AutoTokenizer.from_pretrained(path, trust_remote_code=True)` gives the ids the model trained on:
text is cut into words with jieba 0.42.1's default mode (`jieba.cut`); a word the vocabulary holds is
one token, any other word is cut from the left into the longest pieces the vocabulary holds, down to
single characters; a character without an id becomes its UTF-8 byte pieces (`<0xE9>`; byte fallback)
or `<unk>`. Pieces never cross a word boundary. A text is framed as the model's family trains
(`opener text closer`, pairs `opener a closer b closer`). Special pieces written in the text ("<s>",
"[MASK]") are read as special tokens. Needs jieba, not torch. This file stands alone: it imports
nothing of babylm_jax.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

from transformers import PreTrainedTokenizer

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


class BabyLMWordTokenizer(PreTrainedTokenizer):
    """jieba words whole where the vocabulary holds them, else their longest known pieces (see the module)."""

    vocab_files_names = {"vocab_file": VOCAB_FILE}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file: str, byte_fallback: bool = True, frame_opener: str = "<s>",
                 frame_closer: str = "</s>", **kwargs):
        self._jieba = _import_jieba()
        with open(vocab_file, encoding="utf-8") as f:
            self._pieces = list(json.load(f))
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
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
            if self.byte_fallback and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
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
