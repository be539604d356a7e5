"""What a corpus folder holds: the files `sources` reads, in their fixed order, and what the walk skips or follows.

    files = directory_files(root)   # sorted; a save_to_disk folder's arrow files in the order it lists them

Hidden files and folders, links to folders, links that lead nowhere, entries that are not files
and files of kinds the reader does not take are skipped, and links to files read as their
targets: each kind said once per folder, with a count and an example. A file whose name is not
UTF-8 is refused with the name and a way on, before anything is read; one gone or unreadable
when it is read (`readable`), too.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
from typing import Iterator

SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".parquet", ".arrow")


class CorpusError(ValueError):
    """A problem with the corpus a user can fix; the message names the file and line."""


def suffix(path: pathlib.Path) -> str | None:
    name = path.name.lower()
    return next((s for s in SUFFIXES if name.endswith(s)), None)


@contextlib.contextmanager
def readable(path: pathlib.Path) -> Iterator[None]:
    """Names a corpus file that is gone since the corpus was listed, or that cannot be read, and a way on."""
    try:
        yield
    except FileNotFoundError:
        raise CorpusError(f"corpus file {path} is gone (removed or renamed after the corpus was listed); restore "
                          "it, or run the same command again to read the corpus as it is now") from None
    except PermissionError:
        raise CorpusError(f"corpus file {path} cannot be read (permission denied); give read permission "
                          "(chmod a+r) or move it out of the corpus") from None


def check_names(paths: list[pathlib.Path], entry: str) -> None:
    """Refuses a corpus file whose name is not UTF-8 (its caches and records name every file in UTF-8)."""
    for path in paths:
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:
            raise CorpusError(f"corpus file {os.fsencode(path)!r} (under data.corpus / data.paths {entry!r}) has a "
                              "name that is not UTF-8; rename it, e.g. convmv -f GBK -t UTF-8 --notest FILE, or "
                              "move it out of the corpus") from None


def _saved_dataset_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The arrow files of a `datasets.save_to_disk` folder (Dataset or DatasetDict), in the order it lists them."""
    if (folder / "dataset_dict.json").is_file():
        try:
            splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise CorpusError(f"{folder / 'dataset_dict.json'}: not a datasets DatasetDict file ({error})") from None
        return [f for split in splits for f in _saved_dataset_files(folder / split)]
    state = folder / "state.json"
    try:
        names = [entry["filename"] for entry in json.loads(state.read_text(encoding="utf-8"))["_data_files"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise CorpusError(f"{state}: not a datasets save_to_disk state file ({error})") from None
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise CorpusError(f"{state} lists {missing}, missing from {folder}")
    return [folder / n for n in names]


def directory_files(root: pathlib.Path) -> list[pathlib.Path]:
    """Corpus files under `root`, sorted; save_to_disk folders in their own order. Hidden files and
    folders, links to folders, links that lead nowhere and files of other kinds are skipped, and links
    to files read as their targets: each said once, with a count and an example (`_say_walk`)."""
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        return _saved_dataset_files(root)
    saved = sorted(p.parent for p in root.rglob("state.json") if (p.parent / "dataset_info.json").is_file())
    files, said = [], {}
    for p in sorted(root.rglob("*")):
        relative = p.relative_to(root).parts
        if any(part.startswith(".") for part in relative[:-1]):
            continue  # inside a hidden folder, said as that folder
        kind = _walk_kind(p, saved)
        if kind:
            said.setdefault(kind, []).append(p)
        if (kind and kind != LINKED_FILES) or p.is_dir() or not suffix(p):
            continue
        if suffix(p) == ".arrow" and any(folder in p.parents for folder in saved):
            continue  # read below, in the order of its state.json
        files.append(p)
    for folder in saved:
        files += _saved_dataset_files(folder)
    _say_walk(root, said)
    return files


LINKED_FILES = "links to files, read as the files they point to"  # the one kind the walk follows
_SAVED_DATASET_FILES = ("state.json", "dataset_info.json", "dataset_dict.json")


def _walk_kind(path: pathlib.Path, saved: list[pathlib.Path]) -> str | None:
    """What the corpus walk does with `path` when it is not a plain corpus file or folder, in words; else None."""
    if path.name.startswith("."):
        return "hidden folders" if path.is_dir() else "hidden files"
    if path.is_symlink():
        if not path.exists():
            return "links that lead nowhere (broken, or a loop)"
        if path.is_dir():
            return "links to folders, not followed (name such a folder in data.paths to read it)"
    if path.is_dir():
        return None
    if not path.is_file():
        return "entries that are not files (pipes, sockets, devices)"
    if not suffix(path):
        if path.name in _SAVED_DATASET_FILES and any(path.parent in (folder, folder.parent) for folder in saved):
            return None  # a save_to_disk folder's own record (dataset_dict.json: of the folder of its splits)
        return f"files of kinds the reader does not take (it reads {'/'.join(SUFFIXES)})"
    return LINKED_FILES if path.is_symlink() else None


_said_walks: set[tuple[str, str]] = set()  # (folder, kind): one line each, however often the folder is listed


def _say_walk(root: pathlib.Path, said: dict[str, list[pathlib.Path]]) -> None:
    for kind, paths in said.items():
        if (str(root), kind) in _said_walks:
            continue
        _said_walks.add((str(root), kind))
        example = paths[0].relative_to(root)
        if paths[0].is_symlink():
            example = f"{example} -> {os.readlink(paths[0])}"
        verb = "followed" if kind == LINKED_FILES else "skipped"
        logging.warning("%s: %s %s %s; e.g. %s", root, verb, f"{len(paths):,}", kind, example)

