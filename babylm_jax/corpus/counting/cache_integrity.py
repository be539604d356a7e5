"""Sizes and checksums of cache files, recorded when a cache is written and checked when it is used.

    records = file_records(directory)          # at write time, into the cache's index.json
    damaged = problems(directory, records)     # at load time: {} or {file: what changed}

A cache that fails the check is rebuilt by its owner (corpus_cache.py, tokens/token_cache.py), never
read as it is.
"""
from __future__ import annotations

import hashlib
import pathlib


def file_records(directory: pathlib.Path) -> dict[str, dict]:
    """Size and sha256 of every file under `directory` but index.json, by relative path."""
    return {path.relative_to(directory).as_posix(): file_record(path)
            for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "index.json")}


def file_record(path: pathlib.Path) -> dict:
    """{"bytes", "sha256"} of one file, read in blocks of 4 MiB (files can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


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
