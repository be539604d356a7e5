"""Workdirs on remote filesystems (gs://, s3://, any `etils.epath` path with a scheme).

    place = RunPlace.of("gs://bucket/runs/r1")   # place.local: this host's mirror of it
    place.mirror.pull()    # the remote files into the mirror, each checked against its sha256
    place.mirror.push()    # the mirror's new and changed files up, the file list last

Checkpoints go straight to the remote workdir (orbax writes gs:// itself); everything that needs
a local disk (the lock, the memory-mapped token caches, appends to metrics.jsonl, TensorBoard's
event files) works in a mirror on each host's disk, under `$BABYLM_CACHE_DIR` (default
~/.cache/babylm_jax)/workdirs/<scheme>/<path>, and process 0 pushes it at each checkpoint and at
the end. The remote workdir lists what it holds in FILE_LIST (path -> bytes, sha256), written
after the files, so a host that pulls sees only complete files and checks each one it fetches.
A local workdir is its own mirror: `mirror` is None and nothing is copied.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import json
import logging
import os
import pathlib
import shutil
import socket
import urllib.parse
from typing import Any, BinaryIO

from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write, is_leftover

FILE_LIST = ".babylm_files.json"  # in the remote workdir: what the mirror pushed
LOCAL_ONLY = (rundir.LOCK_FILE, rundir.WANDB)  # never leave the host: the lock, W&B's own folder (W&B uploads it)
REMOTE_ONLY = (rundir.CHECKPOINTS, rundir.MILESTONES, rundir.CORRUPT)  # orbax writes these to the remote itself
_BLOCK = 1 << 24


class RemoteError(OSError):
    """A remote workdir that cannot be read or written, or a file that arrived changed."""


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` names a remote filesystem (scheme://...; file:// is local)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("BABYLM_CACHE_DIR") or pathlib.Path.home() / ".cache" / "babylm_jax")


def mirror_folder(url: str) -> pathlib.Path:
    """This host's folder for the remote workdir `url`."""
    scheme, rest = url.split("://", 1)
    parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
    if not parts:
        raise RemoteError(f"--workdir={url}: name a folder in the bucket, e.g. {scheme}://BUCKET/runs/NAME")
    return cache_root() / "workdirs" / scheme / pathlib.Path(*parts)


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


# The schemes both orbax (tensorstore's kvstore drivers) and etils.epath (an fsspec package) write.
FILESYSTEMS = {"gs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3")}  # scheme -> (package, setup.py extra)
# scheme -> (the variable that points its client at another server, the service's own address)
ENDPOINTS = {"gs": ("STORAGE_EMULATOR_HOST", "https://storage.googleapis.com"),
             "s3": ("AWS_ENDPOINT_URL", "https://s3.amazonaws.com")}
PROBE_SECONDS = 10.0  # the bucket check's wait for the storage service to take a connection
DEBUG_VARIABLES = {"gcsfs": "GCSFS_DEBUG", "s3fs": "S3FS_LOGGING_LEVEL"}  # the package's own switch for its log


def _quiet(package: str) -> None:
    """The filesystem package's log silenced unless its own debug variable is set: each error it logs
    with a traceback it also raises, and those become one-line RemoteErrors here."""
    if not os.environ.get(DEBUG_VARIABLES[package]):
        logging.getLogger(package).setLevel(logging.CRITICAL + 1)


def _unreachable(scheme: str) -> str | None:
    """Why the storage service of `scheme` takes no connection (found within PROBE_SECONDS), or None:
    offline, its client would retry for minutes."""
    variable, default = ENDPOINTS[scheme]
    address = os.environ.get(variable) or default
    parsed = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=PROBE_SECONDS).close()
    except OSError as error:
        return f"{parsed.hostname}:{port} takes no connection ({error or type(error).__name__}); is this host offline?"
    return None


def _remote_path(url: str) -> Any:
    """`url` as an epath.Path, once its scheme is known and its filesystem package installed."""
    scheme = url.split("://", 1)[0]
    if scheme not in FILESYSTEMS:
        raise RemoteError(f"--workdir={url}: {scheme}:// is not a filesystem checkpoints can be written to; "
                          f"choose one of {', '.join(f'{s}://' for s in FILESYSTEMS)} or a local folder")
    package, extra = FILESYSTEMS[scheme]
    if importlib.util.find_spec(package) is None:
        raise ImportError(f"--workdir={url} needs the {package} package: pip install -e \".[{extra}]\"")
    _quiet(package)
    from etils import epath  # orbax's own dependency

    return epath.Path(url)


class Mirror:
    """A remote workdir and this host's copy of its files (all but the checkpoints)."""

    def __init__(self, url: str, local: pathlib.Path | None = None):
        self.url = url.rstrip("/")
        self.remote = _remote_path(self.url)
        self.local = local or mirror_folder(self.url)
        self._known: dict[str, tuple[int, int, str]] = {}  # relative path -> (bytes, mtime_ns, sha256)

    def check_bucket(self) -> None:
        """RemoteError, before any work and within seconds when offline, when the workdir's bucket
        cannot be reached or does not exist."""
        scheme, rest = self.url.split("://", 1)
        bucket = _remote_path(f"{scheme}://{rest.split('/')[0]}")
        problem = _unreachable(scheme)
        if problem:
            raise RemoteError(f"--workdir={self.url}: cannot reach {bucket}: {problem}")
        try:
            found = bucket.exists()
        except Exception as error:  # noqa: BLE001 - each filesystem raises its own errors
            raise RemoteError(f"--workdir={self.url}: cannot reach {bucket}: {type(error).__name__}: {error}") from None
        if not found:
            raise RemoteError(f"--workdir={self.url}: bucket {bucket} does not exist (or these credentials cannot see "
                              "it); create it first, or check the name")

    def _digest(self, name: str) -> str:
        """The sha256 of the mirror's file `name`, hashed again only when its size or mtime changed."""
        path = self.local / name
        stat = path.stat()
        known = self._known.get(name)
        if known is None or known[:2] != (stat.st_size, stat.st_mtime_ns):
            known = (stat.st_size, stat.st_mtime_ns, _sha256(path))
            self._known[name] = known
        return known[2]

    def remote_files(self) -> dict[str, dict]:
        """The remote workdir's file list ({} for a new workdir)."""
        listing = self.remote / FILE_LIST
        try:
            if not listing.exists():
                return {}
            files = json.loads(listing.read_text())
        except ValueError as error:
            raise RemoteError(f"{listing} is not JSON ({error}); delete it and run again to push the files anew") from None
        except Exception as error:  # noqa: BLE001 - each filesystem raises its own errors
            raise RemoteError(f"cannot read {listing}: {type(error).__name__}: {error}") from None
        if not isinstance(files, dict):
            raise RemoteError(f"{listing}: expected a JSON object of files; delete it and run again")
        return files

    def local_files(self) -> list[str]:
        """The mirror's files that belong in the remote workdir, by relative path."""
        if not self.local.is_dir():
            return []
        names = []
        for root, dirs, files in os.walk(self.local):
            rel = pathlib.Path(root).relative_to(self.local)
            if rel == pathlib.Path("."):
                dirs[:] = [d for d in dirs if d not in REMOTE_ONLY + LOCAL_ONLY]
            dirs[:] = [d for d in dirs if not is_leftover(d)]
            names += [(rel / f).as_posix() for f in files
                      if not is_leftover(f) and not (rel == pathlib.Path(".") and f in LOCAL_ONLY + (FILE_LIST,))]
        return sorted(names)

    def pull(self, only: tuple[str, ...] | None = None) -> list[str]:
        """Fetches the remote files (those under the names in `only`, default all) that the mirror
        lacks or holds changed; returns their names. Each fetched file must have the sha256 the
        file list records (else RemoteError, the file not written)."""
        fetched = []
        for name, record in sorted(self.remote_files().items()):
            if only is not None and not any(name == top or name.startswith(f"{top}/") for top in only):
                continue
            target = self.local / name
            if target.is_file() and target.stat().st_size == record["bytes"] and self._digest(name) == record["sha256"]:
                continue
            atomic_write(target, lambda tmp, name=name, record=record: self._fetch(name, record, tmp))
            stat = target.stat()
            self._known[name] = (stat.st_size, stat.st_mtime_ns, record["sha256"])
            fetched.append(name)
        return fetched

    def _fetch(self, name: str, record: dict, tmp: pathlib.Path) -> None:
        source = self.remote / name
        try:
            with source.open("rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, _BLOCK)
        except Exception as error:  # noqa: BLE001
            raise RemoteError(f"cannot fetch {source}: {type(error).__name__}: {error}") from None
        digest = _sha256(tmp)
        if digest != record["sha256"]:
            raise RemoteError(f"{source} arrived with sha256 {digest[:12]}..., but {self.url}/{FILE_LIST} records "
                              f"{record['sha256'][:12]}...: the remote file changed after it was listed; run again")

    def push(self) -> list[str]:
        """Sends the mirror's new and changed files, deletes the remote copies of files the mirror
        held (pulled or pushed) and no longer has, then writes the file list; returns the names sent.
        Files listed remotely that this mirror never held stay listed."""
        listed = self.remote_files()
        files, sent = {}, []
        for name in self.local_files():
            record = {"bytes": (self.local / name).stat().st_size, "sha256": self._digest(name)}
            if listed.get(name) != record:
                with open(self.local / name, "rb") as source:
                    self._upload(name, source)
                sent.append(name)
            files[name] = record
        for name in sorted(set(listed) - set(files)):
            if self._known.pop(name, None) is None:
                files[name] = listed[name]  # another host's file: not ours to delete
                continue
            try:
                (self.remote / name).unlink(missing_ok=True)
            except Exception as error:  # noqa: BLE001
                raise RemoteError(f"cannot delete {self.remote / name}: {type(error).__name__}: {error}") from None
        if files != listed:
            self._upload(FILE_LIST, io.BytesIO(json.dumps(files, indent=1, sort_keys=True).encode()))
        return sent

    def _upload(self, name: str, source: BinaryIO) -> None:
        """Writes `source` to the remote file `name` (one object: readers see all of it or none)."""
        target = self.remote / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as dst:
                shutil.copyfileobj(source, dst, _BLOCK)
        except Exception as error:  # noqa: BLE001 - each filesystem raises its own errors
            raise RemoteError(f"cannot write {target}: {type(error).__name__}: {error}") from None


@dataclasses.dataclass(frozen=True)
class RunPlace:
    """Where a run lives: `local`, this host's folder (the workdir, or a remote workdir's mirror),
    and `mirror` for a remote workdir (None for a local one)."""

    workdir: str  # as the user gave it (a local folder made absolute)
    local: str
    mirror: Mirror | None

    @classmethod
    def of(cls, workdir: str | os.PathLike) -> "RunPlace":
        text = os.fspath(workdir)
        if is_remote(text):
            mirror = Mirror(text)
            return cls(mirror.url, str(mirror.local), mirror)
        local = os.path.abspath(text.removeprefix("file://"))
        return cls(local, local, None)

    @classmethod
    def reached(cls, workdir: str | os.PathLike) -> "RunPlace":
        """`of(workdir)`, its bucket checked (`Mirror.check_bucket`) for a remote workdir."""
        place = cls.of(workdir)
        if place.mirror is not None:
            place.mirror.check_bucket()
        return place

    @property
    def checkpoints_at(self) -> str:
        """The folder holding checkpoints/ and milestones/: the remote workdir itself, else `local`."""
        return self.mirror.url if self.mirror else self.local

    def push(self) -> list[str]:
        return self.mirror.push() if self.mirror else []

    def pull(self, only: tuple[str, ...] | None = None) -> list[str]:
        return self.mirror.pull(only) if self.mirror else []


def readable_run(workdir: str | os.PathLike, needed: tuple[str, ...]) -> RunPlace:
    """The place of a finished or running run that evaluate or export reads: for a remote workdir,
    the files `needed` pulled into this host's mirror (the checkpoints are read from the bucket)."""
    if not is_remote(workdir) and os.path.exists(workdir) and not os.path.isdir(workdir):
        raise NotADirectoryError(f"--workdir {workdir} is a file, not a run's folder; give the --workdir train wrote")
    place = RunPlace.reached(workdir)
    if place.mirror is not None:
        place.pull(needed)
        if not (place.mirror.local / rundir.CONFIG).is_file():
            raise RemoteError(f"--workdir={place.workdir} holds no config.json in {FILE_LIST}: not a babylm_jax run, "
                              "or its train has not written it yet")
    return place
