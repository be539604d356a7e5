"""A checkpoint that does not fit on its disk: one line before anything is written, no leftovers.

`check_room` compares the bytes a checkpoint needs (its arrays: `state.state_bytes`) with the free space of the
folder it goes to, before the save starts; `space_errors` turns orbax's "No space left on
device" from its background threads (when the disk fills meanwhile) into the same one line,
after removing the half-written temporary folder. The last complete checkpoint is untouched.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import pathlib
import shutil
from typing import Iterator

MARGIN = 1.1  # metadata, the iterator state and the file system's blocks
TEMP_SUFFIX = ".orbax-checkpoint-tmp"


def _no_space(root: str, step: int | None, needed: int | None, free: int) -> OSError:
    what = f"checkpoint {step}" if step is not None else "a checkpoint"
    need = f"it needs about {needed / 1e6:,.1f} MB and " if needed else ""
    return OSError(errno.ENOSPC, f"no space left for {what} in {root}: {need}{free / 1e6:,.1f} MB are free; "
                                 "free some space (or lower checkpoint.max_to_keep) and run the same command to resume "
                                 "from the last checkpoint")


def check_room(root: str, step: int, needed: int) -> None:
    """OSError (ENOSPC, one line) when `root` lacks the space for a checkpoint of `needed` bytes."""
    folder = pathlib.Path(root)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < needed * MARGIN:
        raise _no_space(root, step, int(needed * MARGIN), free)


def remove_orbax_temporaries(root: str) -> list[pathlib.Path]:
    """Removes the temporary folders of unfinished saves under `root`; returns them."""
    found = sorted(pathlib.Path(root).glob(f"*{TEMP_SUFFIX}")) if os.path.isdir(root) else []
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return found


def _is_no_space(error: BaseException) -> bool:
    return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


class _QuietNoSpace(logging.Filter):
    """Drops the log records of orbax's background threads that report the full disk (with their
    tracebacks): `space_errors` says it once, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not ("No space left on device" in record.getMessage() or (error is not None and _is_no_space(error)))


_QUIET = _QuietNoSpace()


def quiet_orbax_space_logs() -> None:
    """Installs the filter on the handlers that print orbax's (and asyncio's) records; idempotent."""
    from absl import logging as absl_logging

    for handler in {*logging.getLogger().handlers, absl_logging.get_absl_handler()}:
        if _QUIET not in handler.filters:
            handler.addFilter(_QUIET)


@contextlib.contextmanager
def space_errors(roots: tuple[str, ...], step: int | None = None) -> Iterator[None]:
    """Turns a full disk inside the block into one OSError line, temporaries under `roots` removed."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - orbax reports a full disk as ValueError, OSError or RuntimeError
        if not _is_no_space(error):
            raise
        for root in roots:
            remove_orbax_temporaries(root)
        free = min((shutil.disk_usage(root).free for root in roots if os.path.isdir(root)), default=0)
        raise _no_space(roots[0], step, None, free) from None
