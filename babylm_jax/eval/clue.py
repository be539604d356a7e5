"""Readers for the fine-tuning tasks (CLUE and the challenge's hidden c3 / diagnostic_nli).

Every task becomes a `ClueTask`: train and dev lists of `Example`s whose `choices` hold the
text segments of each input row. A classification example has one row and a label in
0..num_labels-1; a multiple-choice example has one row per option and the label is the
index of the right option. `encode_split` turns them into token ids framed as the model
family trains (`core.families`), truncating over-long rows and counting them.

Files (one JSON object a line unless said otherwise), under `<data_dir>/<task>/`; the field
names live in tasks/formats.py:
- afqmc: train.json / dev.json, `sentence1, sentence2, label ("0"/"1")`.
- ocnli: train.json / dev.json, `sentence1, sentence2, label` (label "-" rows are dropped).
- tnews: train.json / dev.json, `label (code 100..116), label_desc, sentence, keywords, id`.
- cluewsc2020: train.json / dev.json, `target{span1_text, span2_text, ...}, label, text`.
- c3: c3-{d,m}-{train,dev}.json, each ONE JSON list of `[[paragraph, ...],
  [{"question", "choice": [...], "answer"}, ...], id]`.
- diagnostic_nli: the .json/.jsonl file(s) of the folder, `sentence1, sentence2, label,
  phenomenon`; trained on ocnli/train.json.

In the official pipeline's layout (`tasks.layout`), afqmc, ocnli, tnews and cluewsc2020 are
read from `full_eval/clue/<task>.{train,valid}.jsonl` as its preparation writes them
(`formats.FINETUNE_FORMATS`): cluewsc2020's spans at the top level, each label
already the integer id in the order below (ocnli 0 neutral, 1 entailment, 2 contradiction,
-1 rows dropped; tnews codes mapped to 0..14; cluewsc2020 0 true, 1 false); diagnostic_nli
then trains on `ocnli.train.jsonl`.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable

import numpy as np

from babylm_jax.core.registries.families import family_spec
from babylm_jax.core.reading.jsonl import read_json, read_jsonl
from babylm_jax.tasks.formats import (C3_QUESTION_FIELDS, FINETUNE_FORMATS, PREPARED_UNLABELLED, PREPARED_WSC_SPANS,
                                      WSC_TARGET, RowFields)
from babylm_jax.tasks import layout
from babylm_jax.tasks.registry import get_task, task_names
from babylm_jax.corpus.tokens.tokenizer import Tokenizer

TASK_NAMES = task_names("finetune")

# Label names in id order, as the official pipeline (Hugging Face `clue`) numbers them.
AFQMC_LABELS = ("0", "1")
NLI_LABELS = ("neutral", "entailment", "contradiction")
TNEWS_LABELS = tuple(str(code) for code in sorted({*range(100, 117)} - {105, 111}))  # 15 codes -> 0..14
WSC_LABELS = ("true", "false")
OCNLI_DROPPED_LABEL = "-"
WSC_QUESTION = "\"{span2}\"在这段话中指的是\"{span1}\"吗？"


@dataclasses.dataclass(frozen=True)
class Example:
    """One item: text segments per input row (one row, or one per option) and its label."""

    choices: tuple[tuple[str, ...], ...]
    label: int
    group: str = ""  # diagnostic_nli: the phenomenon


@dataclasses.dataclass(frozen=True)
class ClueTask:
    name: str
    kind: str  # "classification" or "multiple_choice"
    label_names: tuple[str, ...]  # classification labels in id order; () for multiple choice
    train: list[Example]
    dev: list[Example]
    dropped: dict[str, int]  # split -> rows skipped by the official rules (ocnli "-")

    @property
    def num_outputs(self) -> int:
        """Logits per input row: one per label, or one score per option."""
        return len(self.label_names) if self.kind == "classification" else 1


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
    """Token ids per example per row, labels, and how many rows were truncated."""

    ids: list[list[list[int]]]
    labels: list[int]
    num_truncated: int


def _field(row: dict, key: str, where: str) -> Any:
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r} (fields: {sorted(row)})")
    return row[key]


def _label_id(value: Any, label_names: tuple[str, ...], where: str) -> int:
    name = str(value)
    if name not in label_names:
        raise ValueError(f"{where}: unknown label {value!r}; expected one of {list(label_names)}")
    return label_names.index(name)


def _read_rows(path: pathlib.Path, make: Callable[[dict, str], Example | None]) -> tuple[list[Example], int]:
    """Examples of a JSONL file and the count of rows `make` dropped."""
    examples, dropped = [], 0
    for number, row in read_jsonl(path):
        example = make(row, f"{path}:{number}")
        if example is None:
            dropped += 1
        else:
            examples.append(example)
    if not examples:
        raise ValueError(f"{path}: no usable examples (empty split)")
    return examples, dropped


def _text_row(fields: RowFields, label_names: tuple[str, ...],
              drop_label: str | None = None) -> Callable[[dict, str], Example | None]:
    """Reads a row of text segments `fields.texts` (one input row) and its label; `drop_label` rows are skipped."""
    def make(row: dict, where: str) -> Example | None:
        label = _field(row, fields.label, where)
        if drop_label is not None and label == drop_label:
            return None
        texts = tuple(str(_field(row, key, where)) for key in fields.texts)
        group = str(row.get(fields.group, "")) if fields.group else ""
        return Example((texts,), _label_id(label, label_names, where), group)

    return make


def _prepared_row(name: str, label_names: tuple[str, ...]) -> Callable[[dict, str], Example | None]:
    """A row of the official preparation's `<task>.{train,valid}.jsonl`: flat fields, the label an integer id."""
    fields = FINETUNE_FORMATS[name]

    def make(row: dict, where: str) -> Example | None:
        label = _field(row, fields.label, where)
        if not isinstance(label, int) or isinstance(label, bool):
            raise ValueError(f"{where}: label {label!r} must be an integer id (the official preparation's shape)")
        if name == "ocnli" and label == PREPARED_UNLABELLED:
            return None
        if not 0 <= label < len(label_names):
            raise ValueError(f"{where}: label {label} out of range 0..{len(label_names) - 1} for {name}")
        texts = tuple(str(_field(row, key, where)) for key in fields.texts)
        if name == "cluewsc2020":
            span1, span2 = (_field(row, key, where) for key in PREPARED_WSC_SPANS)
            texts = (WSC_QUESTION.format(span2=span2, span1=span1), *texts)
        return Example((texts,), label)

    return make


def _wsc_row(row: dict, where: str) -> Example:
    target_key, span1_key, span2_key = WSC_TARGET
    fields = FINETUNE_FORMATS["cluewsc2020"]
    target = _field(row, target_key, where)
    if not isinstance(target, dict):
        raise ValueError(f"{where}: field {target_key!r} must be an object")
    question = WSC_QUESTION.format(
        span2=_field(target, span2_key, f"{where} {target_key}"), span1=_field(target, span1_key, f"{where} {target_key}")
    )
    texts = (question, *(str(_field(row, key, where)) for key in fields.texts))
    return Example((texts,), _label_id(_field(row, fields.label, where), WSC_LABELS, where))


def read_c3_file(path: pathlib.Path) -> list[Example]:
    """One multiple-choice example per question: rows (passage, question, option)."""
    documents = read_json(path, "the c3 files are one JSON list each")
    if not isinstance(documents, list):
        raise ValueError(f"{path}: expected a JSON list of [paragraphs, questions, id] items")
    examples = []
    for index, document in enumerate(documents):
        where = f"{path} item {index}"
        if not (isinstance(document, list) and len(document) >= 2 and isinstance(document[1], list)):
            raise ValueError(f"{where}: expected [[paragraph, ...], [question, ...], id]")
        if len(document) > 2:
            where = f"{path} item {index} (id {document[2]!r})"
        passage = "\n".join(str(p) for p in document[0])
        for q_index, question in enumerate(document[1]):
            q_where = f"{where} question {q_index}"
            question_key, choice_key, answer_key = C3_QUESTION_FIELDS
            options = [str(o) for o in _field(question, choice_key, q_where)]
            answer = str(_field(question, answer_key, q_where))
            if len(options) < 2:
                raise ValueError(f"{q_where}: needs at least 2 choices, got {options}")
            if answer not in options:
                raise ValueError(f"{q_where}: answer {answer!r} is not among its choices {options}")
            text_q = str(_field(question, question_key, q_where))
            rows = tuple((passage, text_q, option) for option in options)
            examples.append(Example(rows, options.index(answer)))
    return examples


def _read_c3(task_dir: pathlib.Path, split: str) -> list[Example]:
    examples: list[Example] = []
    for genre in ("d", "m"):
        examples += read_c3_file(task_dir / f"c3-{genre}-{split}.json")
    if not examples:
        raise ValueError(f"{task_dir}: no {split} questions in c3-d-{split}.json / c3-m-{split}.json (empty split)")
    return examples


def _diagnostic_files(task_dir: pathlib.Path) -> list[pathlib.Path]:
    files = sorted(p for p in task_dir.glob("*") if p.suffix in (".json", ".jsonl") and p.is_file())
    if not files:
        raise FileNotFoundError(f"{task_dir}: no .json/.jsonl file for diagnostic_nli")
    return files


def evenly_spaced(examples: list[Example], limit: int | None) -> list[Example]:
    """At most `limit` examples spread evenly over the split (files are often sorted by label)."""
    if limit is None or len(examples) <= limit:
        return examples
    return [examples[i] for i in np.linspace(0, len(examples) - 1, limit).round().astype(int)]


def load_clue_task(data_dir: str | pathlib.Path, name: str, limit: int | None = None,
                   train_examples: int | None = None) -> ClueTask:
    """Reads task `name` under `data_dir` (either layout); `limit` keeps N evenly spaced examples per split,
    `train_examples` N of the training split (a fixed subset, the same every run)."""
    task = _load_full_task(pathlib.Path(data_dir), name)
    train = evenly_spaced(evenly_spaced(task.train, limit), train_examples)
    return dataclasses.replace(task, train=train, dev=evenly_spaced(task.dev, limit))


_LABELS = {"afqmc": AFQMC_LABELS, "ocnli": NLI_LABELS, "tnews": TNEWS_LABELS, "cluewsc2020": WSC_LABELS}


def _split_reader(data_dir: pathlib.Path, name: str, split: str) -> tuple[pathlib.Path, Callable[[dict, str], Example | None]]:
    """The file of a CLUE task's split ("train"/"dev") and its row reader, in the layout found under `data_dir`."""
    spec = get_task(name)
    path = spec.split_file(data_dir, split)
    if spec.official_clue and spec.in_official_layout(data_dir):
        return path, _prepared_row(name, _LABELS[name])
    make = _wsc_row if name == "cluewsc2020" else _text_row(
        FINETUNE_FORMATS[name], _LABELS[name], OCNLI_DROPPED_LABEL if name == "ocnli" else None)
    return path, make


def _load_full_task(data_dir: pathlib.Path, name: str) -> ClueTask:
    task_dir = data_dir / name
    if name in _LABELS:
        train, train_dropped = _read_rows(*_split_reader(data_dir, name, "train"))
        dev, dev_dropped = _read_rows(*_split_reader(data_dir, name, "dev"))
        return ClueTask(name, "classification", _LABELS[name], train, dev, {"train": train_dropped, "dev": dev_dropped})
    if name == "c3":
        return ClueTask(name, "multiple_choice", (), _read_c3(task_dir, "train"), _read_c3(task_dir, "dev"), {})
    if name == "diagnostic_nli":
        train, train_dropped = _read_rows(*_split_reader(data_dir, "ocnli", "train"))
        dev: list[Example] = []
        for path in _diagnostic_files(task_dir):
            dev += _read_rows(path, _text_row(FINETUNE_FORMATS["diagnostic_nli"], NLI_LABELS))[0]
        return ClueTask(name, "classification", NLI_LABELS, train, dev, {"train": train_dropped, "dev": 0})
    raise ValueError(f"unknown fine-tuning task {name!r}; known: {list(TASK_NAMES)}")


def build_input(segments: list[list[int]], family: str, max_len: int) -> tuple[list[int], bool]:
    """Token ids of one row framed as the family trains (`core.families`), and whether it had to be truncated.

    mlm/hybrid: `[cls] a [sep] b [sep]`; causal: `[bos] a [eos] b [eos]` (the classifier
    reads the last token). Over-long rows lose tokens from the end of the longest segment
    first, the later one on ties (Hugging Face "longest_first").
    """
    segments = [list(s) for s in segments]
    budget = max_len - 1 - len(segments)  # opener + one separator/closer per segment
    if budget < len(segments):
        raise ValueError(f"max length {max_len} is too short for {len(segments)} segments and their special tokens")
    truncated = False
    while sum(len(s) for s in segments) > budget:
        longest = max(reversed(range(len(segments))), key=lambda i: len(segments[i]))  # ties: the later one
        segments[longest].pop()
        truncated = True
    return family_spec(family).framing.frame_segments(segments), truncated


def encode_split(examples: list[Example], tokenizer: Tokenizer, family: str, max_len: int) -> EncodedSplit:
    """Encodes every row of every example (each distinct text once)."""
    cache: dict[str, list[int]] = {}

    def encode(text: str) -> list[int]:
        if text not in cache:
            cache[text] = tokenizer.encode(text)
        return cache[text]

    ids, num_truncated = [], 0
    for example in examples:
        rows = []
        for segments in example.choices:
            row, truncated = build_input([encode(t) for t in segments], family, max_len)
            rows.append(row)
            num_truncated += truncated
        ids.append(rows)
    return EncodedSplit(ids, [e.label for e in examples], num_truncated)
