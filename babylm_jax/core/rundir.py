"""A run's workdir: the name of every file and folder in it, one run at a time, leftovers cleared.

    with workdir_lock(workdir, "train"):
        ...

A second `train` or `prepare` on the same workdir is refused at once with the holder's pid.
The lock is an `flock` on `<workdir>/.lock`, which the kernel releases when its process
dies, so a lock left by a killed run is simply taken over. Once the lock is held, the
temporary files and folders of interrupted writes (see `atomic.is_leftover`) are removed.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import shutil
from typing import Iterator

from babylm_jax.core.atomic import is_leftover

LOCK_FILE = ".lock"
CONFIG = "config.json"  # the run's resolved config
BUDGET = "budget.json"  # jieba word counts against the budget
INPUTS = "inputs.json"  # what the run was started from: corpus files and tokenizer (corpus.run_inputs)
DATA_STATS = "data_stats.json"
LEAKAGE = "leakage.json"  # evaluation items found in the training text (prepare --data_dir)
UNK_AUDIT = "unk_audit.json"
TOKENIZER = "tokenizer"  # the tokenizer the run trains with
DATA = "data"  # the corpus and token caches
FILE_HASHES = f"{DATA}/file_hashes.json"  # the corpus files' sha256s by place and stat, so an unchanged file is read once
PREPARED = f"{DATA}/prepared.json"  # the caches prepare made for the run (opened by the other processes)
CHECKPOINTS = "checkpoints"
MILESTONES = "milestones"  # word-milestone checkpoints
CORRUPT = "checkpoints_corrupt"  # damaged checkpoints, moved aside at resume
RESULTS = "results.json"  # evaluate's official-shape results
EVAL_RESULTS = f"eval/{RESULTS}"  # evaluate's default --output under the workdir
METRICS = "metrics.jsonl"  # train and eval metrics, one JSON line per log step
SAMPLES = "samples.jsonl"  # text from train.sample_prompts at each eval: {"step", "prompt", "text"} a line
SUMMARY = "summary.json"  # the end-of-run summary
LEARNING_CURVES = "learning_curves.png"
TENSORBOARD = "tensorboard"  # train.writers "tensorboard": the run's event files
WANDB = "wandb"  # train.writers "wandb": W&B's own folder of the run
WANDB_RUN = "wandb_run.json"  # the W&B run id and the last step it holds
# What evaluate and export read of a run besides its checkpoints (pulled from a remote workdir).
READ_BY_EVALUATION = (CONFIG, TOKENIZER, RESULTS, EVAL_RESULTS.split("/")[0], SUMMARY, BUDGET)


class WorkdirError(ValueError):
    """The workdir cannot be used: held by another live process, or not writable."""


def local_path(path: str | os.PathLike, option: str) -> str:
    """`path`, refused (WorkdirError) when it names a remote filesystem (gs://, s3://, ...), for the
    options that write or read local folders only (--output, --data_dir): such a path would
    otherwise become a folder named "gs:" on this host's disk. (--workdir takes remote paths,
    see core.remote.)"""
    text = os.fspath(path)
    if "://" in text:
        raise WorkdirError(f"{option}={text}: a remote path ({text.split('://')[0]}://) is taken by --workdir only; "
                           "give a local folder here")
    return text


def _holder(path: pathlib.Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike, command: str) -> Iterator[None]:
    """Holds `<workdir>/.lock` for the block; refuses at once if another process holds it."""
    workdir = pathlib.Path(workdir)
    file = next((p for p in (workdir, *workdir.parents) if p.exists() and not p.is_dir()), None)
    if file is not None:
        raise WorkdirError(f"--workdir {workdir}: {file} is a file, not a folder; give a folder's path (a folder "
                           "that does not exist yet is made)")
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(workdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise WorkdirError(f"cannot write in workdir {workdir}: {error.strerror}; choose a writable --workdir") from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkdirError(
                f"workdir {workdir} is in use by {_holder(workdir / LOCK_FILE)} (lock file {workdir / LOCK_FILE}); "
                "wait for it to finish, stop it, or use another --workdir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{command} pid {os.getpid()}\n".encode())
        remove_leftovers(workdir)
        yield
    finally:
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def reading(workdir: str | os.PathLike) -> Iterator[str | None]:
    """A shared hold on `<workdir>/.lock` while a command reads the run's checkpoints (a `train`
    or `prepare` starting meanwhile is refused). Yields None, or the holder ("train pid N")
    when a run writes the workdir now; a workdir that cannot hold a lock file yields None."""
    path = pathlib.Path(workdir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield None  # a read-only copy of a run: nothing writes it
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield _holder(path)
            return
        yield None
    finally:
        os.close(fd)


# Folders that only train and prepare write to (eval/ and exports may be written meanwhile by others).
OWNED_FOLDERS = (CHECKPOINTS, MILESTONES, DATA)


def remove_leftovers(workdir: str | os.PathLike) -> list[pathlib.Path]:
    """Deletes temporary files and folders of interrupted writes of train and prepare; returns them.

    Looks at the workdir's own entries and everything under OWNED_FOLDERS.
    """
    workdir = pathlib.Path(workdir)
    candidates = list(workdir.iterdir())
    for folder in OWNED_FOLDERS:
        for root, dirs, files in os.walk(workdir / folder):
            candidates += [pathlib.Path(root, name) for name in [*dirs, *files]]
            dirs[:] = [d for d in dirs if not is_leftover(d)]
    removed = []
    for path in candidates:
        if is_leftover(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def find_results(folder: str | os.PathLike) -> pathlib.Path | None:
    """The results.json of a run: `folder`'s own (an evaluate --output folder), else its eval/results.json."""
    for name in (RESULTS, EVAL_RESULTS):
        if (pathlib.Path(folder) / name).is_file():
            return pathlib.Path(folder) / name
    return None


def checkpoint_steps(workdir: str) -> dict[int, str]:
    """step -> the directory (milestones/ or checkpoints/) holding its checkpoint; `workdir` a local
    folder or a remote workdir's URL (core.remote)."""
    from etils import epath  # orbax's dependency (lists gs:// and local folders alike); 85 ms, so imported here

    roots = [epath.Path(workdir) / sub for sub in (MILESTONES, CHECKPOINTS)]
    return {int(step.name): str(root) for root in roots if root.is_dir()
            for step in root.iterdir() if step.name.isdigit() and step.is_dir()}
