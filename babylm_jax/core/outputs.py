"""Where a command may write: never into, over or under its own inputs; one writer per output.

    check_output_path(output, "--output", run=workdir, data={"--data_dir": data_dir})
    with output_lock(output, "export"):
        ...

Checked before any work. A run directory may hold new outputs (`runs/r/eval/`, `runs/r/hf/`),
but never at or under the paths train and prepare own (checkpoints, config.json, ...), and an
output may not be the run directory or hold it; a data folder (task data, corpus) may not be
written at, under or over at all. A lock beside the output refuses a second command writing
the same output at once. `check_writable` proves a folder takes files before the work that fills it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Iterator, Mapping

from babylm_jax.core import rundir
from babylm_jax.core.atomic import is_leftover

# The paths of a run directory that train and prepare write and the other commands read.
RUN_OWNED = (rundir.CHECKPOINTS, rundir.MILESTONES, rundir.DATA, rundir.TOKENIZER, rundir.CONFIG, rundir.BUDGET,
             rundir.DATA_STATS, rundir.METRICS, rundir.SUMMARY, rundir.LEARNING_CURVES, rundir.TENSORBOARD,
             rundir.WANDB, rundir.WANDB_RUN, rundir.UNK_AUDIT, rundir.LEAKAGE, rundir.LOCK_FILE)


class OutputError(ValueError):
    """An output path that would overwrite or delete a command's input, or that another command is writing."""


def _overlap(output: pathlib.Path, path: pathlib.Path) -> str | None:
    if output == path:
        return "is"
    if output in path.parents:
        return "holds"
    if path in output.parents:
        return "is inside"
    return None


def check_output_path(output: str | os.PathLike, option: str, run: str | os.PathLike | None = None,
                      data: Mapping[str, str | os.PathLike] | None = None, inside_run: str = "") -> pathlib.Path:
    """The absolute output path; OutputError when it would write over, into or around an input.

    `run`: the run directory the command reads (outputs inside it allowed, except on what
    train owns); `data`: option -> a folder the command reads (task data, corpus);
    `inside_run`: where in the run this command's output usually goes (the refusals' example).
    """
    out = pathlib.Path(output).resolve()
    if run is not None:
        run_dir = pathlib.Path(run).resolve()
        relation = _overlap(out, run_dir)
        if relation in ("is", "holds"):
            raise OutputError(f"{option} {output} {relation} the run directory {run}: writing there would replace the "
                              f"run; choose a new path, e.g. {run_dir / inside_run}")
        for name in RUN_OWNED:
            relation = _overlap(out, run_dir / name)
            if relation:
                raise OutputError(f"{option} {output} {relation} {run_dir / name}, which train writes and this command "
                                  f"reads; choose another path, e.g. {run_dir / inside_run}")
    for data_option, folder in (data or {}).items():
        relation = _overlap(out, pathlib.Path(folder).resolve())
        if relation:
            raise OutputError(f"{option} {output} {relation} {data_option} {folder}: a command never writes into its "
                              "own input data; choose another path")
    return out


@contextlib.contextmanager
def output_lock(output: str | os.PathLike, command: str) -> Iterator[None]:
    """Holds `.<name>.lock` beside `output` for the block (removed after); refuses at once if
    another command holds it."""
    output = pathlib.Path(output)
    created = [p for p in (output.parent, *output.parent.parents) if not p.exists()]  # removed after, if empty
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = output.parent / f".{output.name}.lock"
    fd = _take(lock, output)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{command} pid {os.getpid()}\n".encode())
        yield
    finally:
        lock.unlink(missing_ok=True)  # before the unlock: a waiter then finds the file gone and starts again
        os.close(fd)
        for folder in created:  # a command that failed before writing leaves no empty folders
            with contextlib.suppress(OSError):
                folder.rmdir()


def _take(lock: pathlib.Path, output: pathlib.Path) -> int:
    """An flock on `lock` (the file that is still at that path once locked), or OutputError if held."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read(lock) or "another command"
            raise OutputError(f"{output} is being written by {holder} (lock {lock}); wait for it, or choose another "
                              "output path") from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed the file as we locked it: lock the new one


def check_writable(folder: str | os.PathLike, option: str) -> pathlib.Path:
    """`folder` once a file could be created in it (the folder and a temporary file are made, then
    removed); OutputError naming `option` and the path when not (a read-only place, a file on the way)."""
    folder = pathlib.Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable.tmp-"):
            pass
    except OSError as error:
        raise OutputError(f"{option} {folder}: cannot write there ({error.strerror or error}); choose a writable "
                          f"folder for {option}") from None
    finally:
        for made in created:  # as it was: a command that fails later leaves no empty folders
            with contextlib.suppress(OSError):
                made.rmdir()
    return folder


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def remove_temporaries(folder: str | os.PathLike, of: str = "") -> list[pathlib.Path]:
    """Removes the temporary files and folders an interrupted write left directly in `folder` (the
    output folder of a command that holds its lock), only those of `of` when given (the
    temporaries of `<folder>/<of>`); returns them."""
    folder, prefix = pathlib.Path(folder), f".{of}." if of else "."
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if is_leftover(p.name) and p.name.startswith(prefix)]
    for path in found:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return found


NEARLY_FULL_BYTES = 16 * 2**20  # a short write on a disk with less room than this is the full disk


def is_full_disk(error: BaseException, folder: str | os.PathLike) -> bool:
    """Whether `error` is the disk of `folder` filling up: ENOSPC, or a short write (numpy's "N requested and
    M written", with no errno) on a disk left with almost no room."""
    if getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error):
        return True
    return isinstance(error, OSError) and "written" in str(error) and free_bytes(folder) < NEARLY_FULL_BYTES


def free_bytes(folder: str | os.PathLike) -> int:
    """The free space of the disk `folder` is (or will be) on."""
    path = pathlib.Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


@contextlib.contextmanager
def full_disk_errors(folder: str | os.PathLike, what: str, needed: Callable[[], str], fix: str) -> Iterator[None]:
    """A full disk while the block writes `what` under `folder` becomes one line (OSError ENOSPC) naming the
    folder, the space it needs (`needed()`, e.g. "about 12.0 MB", worked out only then), the space free and `fix`."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - writers report a full disk in their own types (SafetensorError)
        if not is_full_disk(error, folder):
            raise
        full = OSError(f"no space left for {what} in {folder}: it needs {needed()} and "
                       f"{free_bytes(folder) / 1e6:,.1f} MB are free; {fix}")
        full.errno = errno.ENOSPC  # said without "[Errno 28]"
        raise full from None
