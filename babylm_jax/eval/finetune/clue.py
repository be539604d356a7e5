"""The fine-tuning tasks as examples and token ids (CLUE and the challenge's hidden c3 / diagnostic_nli).

Every task becomes a `ClueTask`: train and dev lists of `Example`s read through its registry
entry (`tasks.readers.read_split`: the entry's reader, label map and split files, in the layout
found under the data directory), whose `choices` hold the text segments of each input row.
`encode_split` turns them into token ids framed as the model family trains (`core.families`),
truncating over-long rows and counting them.
"""
from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from babylm_jax.core.families import family_spec
from babylm_jax.tasks.readers import Example, read_split
from babylm_jax.tasks.registry import SPLITS, TASKS, task_names
from babylm_jax.corpus.tokenizer import Tokenizer


@dataclasses.dataclass(frozen=True)
class ClueTask:
    """A fine-tuning task as read: its kind and labels (its entry's), its splits and the unlabelled rows dropped."""

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


def evenly_spaced(examples: list[Example], limit: int | None) -> list[Example]:
    """At most `limit` examples spread evenly over the split (files are often sorted by label)."""
    if limit is None or len(examples) <= limit:
        return examples
    return [examples[i] for i in np.linspace(0, len(examples) - 1, limit).round().astype(int)]


def load_clue_task(data_dir: str | pathlib.Path, name: str, limit: int | None = None,
                   train_examples: int | None = None) -> ClueTask:
    """Reads fine-tuning task `name` under `data_dir` (either layout); `limit` keeps N evenly spaced examples per
    split, `train_examples` N of the training split (a fixed subset, the same every run)."""
    spec = TASKS.get(name)
    if spec is None or spec.finetune is None:
        raise ValueError(f"unknown fine-tuning task {name!r}; known: {list(task_names('finetune'))}")
    (train, train_dropped), (dev, dev_dropped) = (read_split(data_dir, spec, split) for split in SPLITS)
    train = evenly_spaced(evenly_spaced(train, limit), train_examples)
    return ClueTask(name, spec.finetune.kind, spec.finetune.labels, train, evenly_spaced(dev, limit),
                    {"train": train_dropped, "dev": dev_dropped})


def build_input(segments: list[list[int]], family: str, max_len: int) -> tuple[list[int], bool]:
    """Token ids of one row framed as the family trains (`core.families`), and whether it was truncated.

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
