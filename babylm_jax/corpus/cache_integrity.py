"""Sizes and checksums of cache files, recorded when a cache is written and checked when it is used.

    records = file_records(directory)          # at write time, into the cache's index.json
    damaged = problems(directory, records)     # at load time: {} or {file: what changed}

A cache that fails the check is rebuilt by its owner (corpus_cache.py, tokens/token_cache.py), never
read as it is.

    hashes = FileHashes(workdir / rundir.FILE_HASHES)   # the sha256s this workdir has already streamed
    record = hashes.record(path)                        # {"bytes", "sha256"}: read only when not known
    hashes.save()
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib

from babylm_jax.core.atomic import atomic_write_json


def file_records(directory: pathlib.Path) -> dict[str, dict]:
    """Size and sha256 of every file under `directory` but index.json, by relative path."""
    return {path.relative_to(directory).as_posix(): file_record(path)
            for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "index.json")}


def file_record(path: pathlib.Path) -> dict:
    """{"bytes", "sha256"} of one file as read, in blocks of 4 MiB (files can be large)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
            size += len(block)
    return {"bytes": size, "sha256": digest.hexdigest()}


def problems(directory: pathlib.Path, recorded: dict[str, dict]) -> dict[str, str]:
    """Recorded files under `directory` that are missing, of another size or changed: name -> what."""
    found = file_records(directory)
    out = {}
    for name, record in recorded.items():
        path = directory / name
        if name not in found:
            out[name] = f"{path} is missing"
        elif found[name]["bytes"] != record["bytes"]:
            out[name] = f"{path} has {found[name]['bytes']} bytes, {record['bytes']} were written"
        elif found[name]["sha256"] != record["sha256"]:
            out[name] = f"{path} has changed since it was written (its sha256 differs)"
    return out


def differences(recorded: dict[str, dict], found: dict[str, dict], what: str) -> list[str]:
    """What differs between two {file: {"bytes", "sha256"}} maps, one phrase a file."""
    out = []
    for name in sorted(recorded.keys() | found.keys()):
        old, new = recorded.get(name), found.get(name)
        if old is None:
            out.append(f"{what} {name} was added")
        elif new is None:
            out.append(f"{what} {name} was removed")
        elif old["bytes"] != new["bytes"]:
            out.append(f"{what} {name} has {new['bytes']:,} bytes, {old['bytes']:,} were recorded")
        elif old["sha256"] != new["sha256"]:
            out.append(f"{what} {name} has changed (same size, its sha256 differs)")
    return out


def _signature(file: pathlib.Path) -> list[int]:
    """What says a file is unchanged in place: its size, modification and change times and inode."""
    stat = file.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


_HASHED: dict[str, list] = {}  # this process's hashes by absolute path: [size, mtime, ctime, inode, sha256]


class FileHashes:
    """The {"bytes", "sha256"} of files, each streamed once: remembered by the file's absolute path, size,
    modification and change times and inode, in this process and, once `save`d, in the JSON file `path`
    (None: this process only). A file unchanged in place is not read again; a copied, moved, touched or
    rewritten one is hashed again (the record is a shortcut, never the identity: a file is known by its
    content)."""

    def __init__(self, path: pathlib.Path | None):
        self.path, self._changed = path, False
        try:
            known = json.loads(path.read_text()) if path is not None and path.exists() else {}
        except (OSError, ValueError):
            known = {}  # a damaged record only costs hashing again
        self._known: dict[str, list] = known if isinstance(known, dict) else {}

    def record(self, file: pathlib.Path) -> dict:
        """{"bytes", "sha256"} of `file`: from the record where its stat matches, else streamed and recorded."""
        where, signature = os.path.abspath(file), _signature(file)
        for known in (_HASHED.get(where), self._known.get(where)):
            if isinstance(known, list) and len(known) == 5 and known[:4] == signature:
                self._remember(where, known)
                return {"bytes": signature[0], "sha256": known[4]}
        record = file_record(file)
        if _signature(file) == signature == [record["bytes"], *signature[1:]]:  # not changed while it was read
            self._remember(where, signature + [record["sha256"]])
        return record

    def _remember(self, where: str, known: list) -> None:
        _HASHED[where] = known
        if self._known.get(where) != known:
            self._known[where], self._changed = known, True

    def save(self) -> None:
        """Writes the record where new files were hashed (temp, then rename)."""
        if self._changed and self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, self._known)
            self._changed = False
