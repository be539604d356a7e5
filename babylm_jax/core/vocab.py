"""The special ids and how a text is wrapped in them (each family's framing: `core.families`).

Special ids are fixed for every tokenizer: pad=0, unk=1, bos=2, eos=3, mask=4, cls=5, sep=6.

Every consumer takes its family's framing from `core.families`, so a model never meets at
evaluation an input embedding it did not train: the token cache (training documents),
minimal-pair scoring, fMRI features, CLUE fine-tuning inputs and the exported Hugging Face
tokenizer's templates.

    decoder (causal)         [bos] text [eos]    pairs: [bos] a [eos] b [eos]
    encoder (mlm, hybrid)    [cls] text [sep]    pairs: [cls] a [sep] b [sep]

A pair joins its segments with the closer, as BERT joins them with [sep]: the model has
trained that embedding at the end of every document. Causal scoring feeds `[bos] text`
without the closer: under causal attention a token after the text changes no score of the
text's tokens, and none reads it (as the official pipeline scores the exported model).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

PAD_ID, UNK_ID, BOS_ID, EOS_ID, MASK_ID, CLS_ID, SEP_ID = range(7)
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>", "[MASK]", "[CLS]", "[SEP]")


@dataclasses.dataclass(frozen=True)
class Framing:
    """The special ids that open and close a text (and separate the segments of a pair)."""

    opener_id: int
    closer_id: int
    causal: bool

    def frame(self, ids: Sequence[int]) -> list[int]:
        """One text as a model sees it in training: opener, ids, closer."""
        return [self.opener_id, *ids, self.closer_id]

    def frame_segments(self, segments: Sequence[Sequence[int]]) -> list[int]:
        """Several texts in one row (a fine-tuning pair): opener, then each segment and a closer."""
        ids = [self.opener_id]
        for segment in segments:
            ids += [*segment, self.closer_id]
        return ids

    def scoring_input(self, ids: Sequence[int]) -> list[int]:
        """What a sentence score reads: `[bos] ids` (causal; the closer cannot change it) or the framed text."""
        return [self.opener_id, *ids] if self.causal else self.frame(ids)

    def hf_templates(self) -> tuple[str, str]:
        """`tokenizers` TemplateProcessing templates (single, pair) giving the same ids."""
        opener, closer = SPECIAL_PIECES[self.opener_id], SPECIAL_PIECES[self.closer_id]
        return f"{opener} $A {closer}", f"{opener} $A {closer} $B {closer}"

