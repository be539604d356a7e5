"""Atomic file writes: write a temporary file beside the target, then rename it into place."""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import Any, Callable


def atomic_write(path: str | os.PathLike, write: Callable[[pathlib.Path], None]) -> None:
    """Calls `write(temp_path)` for a temp file beside `path`, then renames it onto `path`."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    temp = pathlib.Path(temp_name)
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda temp: temp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    atomic_write(path, lambda temp: temp.write_bytes(data))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False))
