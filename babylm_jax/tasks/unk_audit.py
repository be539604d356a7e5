"""UNK audit: the share of hanzi items scored wrong under the official UNK rule.

Official rule (hanzi_structure, hanzi_pinyin and their hidden twins): an item is wrong when
either `sentence_good` or `sentence_bad` contains the tokenizer's UNK.
"""
from __future__ import annotations

import pathlib
from typing import Protocol, Sequence

from babylm_jax.core.jsonl import read_jsonl
from babylm_jax.tasks import layout
from babylm_jax.tasks.formats import pair_fields
from babylm_jax.tasks.registry import task_of_folder


class Tokenizer(Protocol):
    """What the audit needs of a tokenizer (corpus.tokenizer.Tokenizer has it)."""

    unk_id: int | None

    def encode(self, text: str) -> Sequence[int]: ...


def hanzi_folders(data_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """The hanzi_* task folders under `data_dir`, in either layout (`tasks.layout`)."""
    return [folder for name, folder in layout.task_folders(data_dir) if name.startswith("hanzi_") and task_of_folder(name)]


def unk_audit(tokenizer: Tokenizer, data_dir: str | pathlib.Path) -> dict:
    """{task: {"items", "unk_items", "unk_share"}} for every hanzi_* folder under `data_dir`."""
    report = {}
    for folder in hanzi_folders(data_dir):
        items = unk_items = 0
        for path in sorted(folder.rglob("*.jsonl")):
            for number, row in read_jsonl(path):
                fields = pair_fields(task_of_folder(folder.name).pair_format, row)
                if fields.good not in row or fields.bad not in row:
                    raise ValueError(f"{path}:{number}: expected fields {fields.good} and {fields.bad}")
                items += 1
                if tokenizer.unk_id is not None:
                    unk_items += any(tokenizer.unk_id in tokenizer.encode(row[k]) for k in (fields.good, fields.bad))
        report[folder.name] = {"items": items, "unk_items": unk_items, "unk_share": unk_items / max(items, 1)}
    return report
