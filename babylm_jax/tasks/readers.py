"""Readers of the fine-tuning tasks' files, one per `formats.FileFormat` (an entry's `FinetuneSpec.reader`).

A reader turns one file into `Example`s (and the count of unlabelled rows it dropped), and
gives the leakage check the evaluation texts the file holds. A classification example has one
input row and a label in 0..len(labels)-1; a multiple-choice example has one row per option
and the label is the index of the right option. Field names live in `formats`.

- ROWS: one JSON object a line, `fields.texts` the row's segments in order, `fields.label` a
  label name of `labels` (afqmc "0"/"1"; ocnli and diagnostic_nli neutral, entailment,
  contradiction; tnews codes 100..116 less 105 and 111), `fields.group` reported per group.
- WSC: as ROWS, asked first whether the pronoun `target.span2_text` means `target.span1_text`
  (cluewsc2020, labels "true"/"false").
- C3: each file ONE JSON list of `[[paragraph, ...], [{"question", "choice": [...], "answer"}, ...],
  id]`; one multiple-choice example per question, rows (passage, question, option).

In the official pipeline's layout (`tasks.layout`) the CLUE tasks' files are the ones its
preparation writes (`prepared`): cluewsc2020's spans at the top level, each label already the
integer id in `labels` order (ocnli's unlabelled rows -1).
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Iterator

from babylm_jax.core.jsonl import read_json, read_jsonl, text_field
from babylm_jax.tasks.formats import (C3_QUESTION_FIELDS, PAIR_FORMATS, PREPARED_UNLABELLED, PREPARED_WSC_SPANS,
                                      WSC_TARGET, FileFormat)
from babylm_jax.tasks.registry import TaskSpec

WSC_QUESTION = "\"{span2}\"在这段话中指的是\"{span1}\"吗？"
C3_FIX = "the c3 files are one JSON list each"


@dataclasses.dataclass(frozen=True)
class Example:
    """One item: text segments per input row (one row, or one per option) and its label."""

    choices: tuple[tuple[str, ...], ...]
    label: int
    group: str = ""  # the value of the task's `fields.group` (diagnostic_nli: the phenomenon)


@dataclasses.dataclass(frozen=True)
class Reader:
    """A file format: (examples, rows dropped) of a file of a task, prepared or not, and its evaluation texts."""

    examples: Callable[[pathlib.Path, TaskSpec, bool], tuple[list[Example], int]]
    texts: Callable[[pathlib.Path, TaskSpec], Iterator[str]]


def _field(row: dict, key: str, where: str) -> Any:
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r} (fields: {sorted(row)})")
    return row[key]


def _label(row: dict, spec: TaskSpec, prepared: bool, where: str) -> int | None:
    """The row's label id; None for an unlabelled row (dropped, as the official preparation does)."""
    task = spec.finetune
    value = _field(row, task.fields.label, where)
    if not prepared:
        if task.unlabelled is not None and value == task.unlabelled:
            return None
        if str(value) not in task.labels:
            raise ValueError(f"{where}: unknown label {value!r}; expected one of {list(task.labels)}")
        return task.labels.index(str(value))
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: label {value!r} must be an integer id (the official preparation's shape)")
    if task.unlabelled is not None and value == PREPARED_UNLABELLED:
        return None
    if not 0 <= value < len(task.labels):
        raise ValueError(f"{where}: label {value} out of range 0..{len(task.labels) - 1} for {spec.name}")
    return value


def _segments(row: dict, spec: TaskSpec, prepared: bool, where: str) -> tuple[str, ...]:
    return tuple(text_field(row, key, where) for key in spec.finetune.fields.texts)


def _wsc_segments(row: dict, spec: TaskSpec, prepared: bool, where: str) -> tuple[str, ...]:
    """The question whether the pronoun (span 2) means span 1, then the row's texts."""
    if prepared:
        span1, span2 = (text_field(row, key, where) for key in PREPARED_WSC_SPANS)
    else:
        target_key, span1_key, span2_key = WSC_TARGET
        target = _field(row, target_key, where)
        if not isinstance(target, dict):
            raise ValueError(f"{where}: field {target_key!r} must be an object")
        span1, span2 = (text_field(target, key, f"{where} {target_key}") for key in (span1_key, span2_key))
    return (WSC_QUESTION.format(span2=span2, span1=span1), *_segments(row, spec, prepared, where))


def _row_reader(segments: Callable[[dict, TaskSpec, bool, str], tuple[str, ...]]) -> Reader:
    """A one-object-a-line format whose rows are one input row each, their segments by `segments`."""
    def examples(path: pathlib.Path, spec: TaskSpec, prepared: bool) -> tuple[list[Example], int]:
        read, dropped, group = [], 0, spec.finetune.fields.group
        for number, row in read_jsonl(path):
            where = f"{path}:{number}"
            label = _label(row, spec, prepared, where)
            if label is None:
                dropped += 1
                continue
            read.append(Example((segments(row, spec, prepared, where),), label, str(row.get(group, "")) if group else ""))
        return read, dropped

    return Reader(examples, lambda path, spec: _field_texts(path, spec.finetune.fields.texts))


def _field_texts(path: pathlib.Path, fields: tuple[str, ...]) -> Iterator[str]:
    """The string values of `fields` in every row of a one-object-a-line file."""
    for _, row in read_jsonl(path):
        yield from (row[field] for field in fields if isinstance(row.get(field), str))


def _c3_examples(path: pathlib.Path, spec: TaskSpec, prepared: bool) -> tuple[list[Example], int]:
    """One multiple-choice example per question, rows (passage, question, option); none dropped."""
    documents = read_json(path, C3_FIX)
    if not isinstance(documents, list):
        raise ValueError(f"{path}: expected a JSON list of [paragraphs, questions, id] items")
    examples = []
    for index, document in enumerate(documents):
        where = f"{path} item {index}"
        if not (isinstance(document, list) and len(document) >= 2 and isinstance(document[1], list)):
            raise ValueError(f"{where}: expected [[paragraph, ...], [question, ...], id]")
        if len(document) > 2:
            where = f"{path} item {index} (id {document[2]!r})"
        if not isinstance(document[0], list) or not all(isinstance(p, str) for p in document[0]):
            raise ValueError(f"{where}: its paragraphs must be a list of strings")
        passage = "\n".join(document[0])
        examples += [_c3_question(passage, question, f"{where} question {q}") for q, question in enumerate(document[1])]
    return examples, 0


def _c3_question(passage: str, question: dict, where: str) -> Example:
    question_key, choice_key, answer_key = C3_QUESTION_FIELDS
    options = [str(o) for o in _field(question, choice_key, where)]
    answer = str(_field(question, answer_key, where))
    if len(options) < 2:
        raise ValueError(f"{where}: needs at least 2 choices, got {options}")
    if answer not in options:
        raise ValueError(f"{where}: answer {answer!r} is not among its choices {options}")
    text = text_field(question, question_key, where)
    return Example(tuple((passage, text, option) for option in options), options.index(answer))


def _c3_texts(path: pathlib.Path, spec: TaskSpec) -> Iterator[str]:
    """The passages' paragraphs."""
    for document in read_json(path, C3_FIX):
        yield from (p for p in document[0] if isinstance(p, str))


READERS: dict[FileFormat, Reader] = {  # FinetuneSpec.reader -> the reader of that format
    FileFormat.ROWS: _row_reader(_segments),
    FileFormat.WSC: _row_reader(_wsc_segments),
    FileFormat.C3: Reader(_c3_examples, _c3_texts),
}


def read_split(data_dir: str | pathlib.Path, spec: TaskSpec, split: str) -> tuple[list[Example], int]:
    """The examples of a fine-tuning task's split ("train"/"dev") and the unlabelled rows dropped.

    The split's files are those of the task its `needs` names for the split (diagnostic_nli trains
    on ocnli's), else its own, in the layout found under `data_dir`; each read by that task's reader.
    """
    source = spec.split_source(split)
    reader, prepared = READERS[source.finetune.reader], source.in_official_layout(data_dir)
    examples: list[Example] = []
    dropped, paths = 0, []
    for path in source.split_files(data_dir, split):
        read, skipped = reader.examples(path, source, prepared)
        examples.extend(read)
        dropped += skipped
        paths.append(str(path))
    if not examples:
        raise ValueError(f"{', '.join(paths)}: no usable examples (empty split)")
    return examples, dropped


def eval_texts(spec: TaskSpec, path: pathlib.Path) -> Iterator[str]:
    """The evaluation texts in one file of task `spec` (minimal pairs: both sentences); none for other tracks."""
    if spec.pair_format:
        yield from _field_texts(path, (PAIR_FORMATS[spec.pair_format].good, PAIR_FORMATS[spec.pair_format].bad))
    elif spec.finetune is not None:
        yield from READERS[spec.finetune.reader].texts(path, spec)


def has_texts(spec: TaskSpec | None) -> bool:
    """Whether `eval_texts` finds texts in the task's files."""
    return spec is not None and bool(spec.pair_format or spec.finetune)
