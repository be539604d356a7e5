"""The field names of each evaluation task's files: one home for every reader.

Read by the minimal-pair scorer (eval/zero_shot/minimal_pairs.py), the fine-tuning readers
(tasks/readers.py), the leakage check (tasks/leakage.py) and the UNK audit (tasks/unk_audit.py);
each task's format (and a fine-tuning task's `RowFields`) is named by its registry entry
(tasks/registry.py). Files are one JSON object a line, except c3 (one JSON list a file).

Minimal pairs: a good and a bad sentence, the UID that accuracy is macro-averaged over and
the phenomenon it is reported under. The hanzi files come in two shapes: from the hub
(task / meta_structure, condition) and after the official preparation (UID, phenomenon, as
every prepared zero-shot file); `pair_fields` reads each row in its own shape.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from babylm_jax.core.enums import StrictEnum


class FileFormat(StrictEnum):
    """A fine-tuning task's file format (`FinetuneSpec.reader`); its reader is `tasks.readers.READERS[format]`."""

    ROWS = "rows"  # one JSON object a line, the row's text fields in order
    WSC = "wsc"  # as ROWS, asked first whether the pronoun means the span (cluewsc2020)
    C3 = "c3"  # one JSON list a file of [paragraphs, questions, id]


@dataclasses.dataclass(frozen=True)
class PairFields:
    """The fields of a minimal-pair row."""

    good: str
    bad: str
    uid: str | None  # None: the file stem is the UID
    phenomenon: str | None  # None: the UID is the phenomenon


PAIR_FORMATS: dict[str, PairFields] = {
    "zhoblimp": PairFields("sentence_good", "sentence_bad", "UID", "phenomenon"),
    "xcomps": PairFields("acceptable_sent", "unacceptable_sent", None, None),
    "hanzi_structure": PairFields("sentence_good", "sentence_bad", "task", "meta_structure"),
    "hanzi_pinyin": PairFields("sentence_good", "sentence_bad", "condition", None),
}
PREPARED_PAIRS = PairFields("sentence_good", "sentence_bad", "UID", "phenomenon")  # after the official preparation
COGBENCH_ROIS = ("Cognition", "Language", "Manipulation", "Memory", "Reward", "Vision")  # the fmri task's regions
XCOMPS_UID_FIELDS = ("UID", "uid")  # xcomps rows may name their UID; files without one are one UID each


def pair_fields(format_name: str, row: Mapping) -> PairFields:
    """The fields of one row of a `format_name` file (a key of PAIR_FORMATS): hanzi rows in the prepared shape read as such."""
    fields = PAIR_FORMATS[format_name]
    if format_name.startswith("hanzi") and PREPARED_PAIRS.uid in row:
        return PREPARED_PAIRS
    if fields.uid is None:
        return dataclasses.replace(fields, uid=next((k for k in XCOMPS_UID_FIELDS if k in row), None))
    return fields


@dataclasses.dataclass(frozen=True)
class RowFields:
    """The fields of a fine-tuning row: its text segments in input order, its label and group."""

    texts: tuple[str, ...]
    label: str = "label"
    group: str | None = None  # results are also reported per group


WSC_TARGET = ("target", "span1_text", "span2_text")  # cluewsc2020: the object and its two spans, asked about
# After the official preparation (full_eval/clue/<task>.{train,valid}.jsonl): the same texts with
# cluewsc2020's spans flattened to the top level, every label an integer id (ocnli -1 = unlabelled).
PREPARED_WSC_SPANS = ("span1_text", "span2_text")
PREPARED_UNLABELLED = -1
# c3: [[paragraph, ...], [{question, choice: [...], answer}, ...], id] per item of one JSON list
C3_QUESTION_FIELDS = ("question", "choice", "answer")

