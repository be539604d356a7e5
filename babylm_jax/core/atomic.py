"""Atomic file and directory writes: write a temporary beside the target, then rename it into place.

Temporary names carry a mark (`.<name>.tmp-*`, `.<name>.old-*`) so that the leftovers of a
killed run can be recognised and removed at the next start (`is_leftover`).
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Callable, Iterator


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask is process-wide and not thread-safe
TEMP_MARKS = (".tmp-", ".old-")


def default_file_mode() -> int:
    """The mode a new file gets under this process's umask (0o644 under the usual 022)."""
    return 0o666 & ~_UMASK


def is_leftover(name: str) -> bool:
    """Whether a file name is a temporary name of ours (or orbax's), left by an interrupted write."""
    return (name.startswith(".") and any(mark in name for mark in TEMP_MARKS)) or ".orbax-checkpoint-tmp" in name


def atomic_write(path: str | os.PathLike, write: Callable[[pathlib.Path], None]) -> None:
    """Calls `write(temp_path)` for a temp file beside `path`, then renames it onto `path`."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    temp = pathlib.Path(temp_name)
    try:
        temp.chmod(0o666 & ~_UMASK)  # mkstemp makes 0600; a written file gets the usual mode
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


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, replace: bool = False) -> Iterator[pathlib.Path]:
    """A temporary directory beside `final`, renamed to `final` on success, removed on failure.

    An existing `final` is kept (another process finished the same work first) unless
    `replace`, when it is moved aside, swapped out for the new directory, then removed.
    """
    final = pathlib.Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    old = None
    try:
        tmp.chmod(0o777 & ~_UMASK)  # mkdtemp makes 0700; a written directory gets the usual mode
        yield tmp
        if replace and final.exists():
            old = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old-"))
            os.replace(final, old / final.name)
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
