"""What a run was started from: its corpus files and its tokenizer, recorded once and checked at each resume.

    corpus = corpus_files(data_config, workdir)  # each source file's bytes and sha256 (streamed once)
    recorded = check_inputs(workdir, corpus)     # at a resume, before any work: raises InputsChanged
    record_inputs(workdir, corpus)               # at a first start, once prepare has made the tokenizer

`<workdir>/inputs.json` (rundir.INPUTS) holds {"corpus": {file: {"bytes", "sha256"}}, "tokenizer":
{file: ...}, "names": NAMES}: corpus files by their names under their sources' roots
(`sources.file_name`), so a corpus moved or copied elsewhere with the same files is the same
inputs. A record written before it named files so (no "names") held each file's path as
configured; its names are matched to today's by their ends. The data settings themselves are
config keys, checked by `training.run_config`.
"""
from __future__ import annotations

import os
import pathlib

from babylm_jax.config.data import DataConfig
from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.core.jsonl import read_json
from babylm_jax.corpus import hanzi_facts, sources
from babylm_jax.corpus.cache_integrity import FileHashes, differences, file_records

STAMP = "fingerprint.txt"  # the tokenizer folder's cache stamp (corpus.preparation), not part of the tokenizer
_SHOWN = 3  # changes named in the refusal; the rest are counted
FIX = "restore the inputs it was started from, or start a new --workdir"
NAMES = "under each source's root"  # how inputs.json names corpus files (absent: by their paths as configured)


class InputsChanged(ValueError):
    """A resume onto other inputs than the run started from, or a damaged record of them."""


def corpus_files(data_config: DataConfig, workdir: str | os.PathLike) -> dict[str, dict]:
    """Bytes and sha256 of every file of the corpus's sources, by name (`sources.file_name`), the run's hanzi
    facts included; each file streamed only where the workdir's record of hashes (rundir.FILE_HASHES, which
    prepare writes) or this process does not know it unchanged. Nothing else is written but the facts where
    they are missing (`hanzi_facts.ensure_facts`: made from the settings, the same bytes every time)."""
    hashes = FileHashes(pathlib.Path(workdir) / rundir.FILE_HASHES)
    return sources.corpus_files(hanzi_facts.run_sources(data_config, workdir), hashes)


def tokenizer_files(workdir: str | os.PathLike) -> dict[str, dict]:
    """Bytes and sha256 of the files of `<workdir>/tokenizer/`, by path in the workdir (none before prepare)."""
    folder = pathlib.Path(workdir) / rundir.TOKENIZER
    records = file_records(folder) if folder.is_dir() else {}
    return {f"{rundir.TOKENIZER}/{name}": record for name, record in records.items() if name != STAMP}


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
    corpus (`corpus_files`) or the workdir's tokenizer differ from it. A tokenizer/ missing whole is not
    a change: prepare makes it again from the corpus checked here, and the checkpoint's vocabulary
    (`training.checkpoint_vocabulary`) checks what it made."""
    path = pathlib.Path(workdir) / rundir.INPUTS
    record = _read_record(path)
    if record is None:
        return False
    recorded = record["corpus"] if record.get("names") == NAMES else _renamed(record["corpus"], corpus)
    changes = differences(recorded, corpus, "corpus file")
    if (pathlib.Path(workdir) / rundir.TOKENIZER).is_dir():  # one missing whole (a half-copied run) is made again
        changes += differences(record["tokenizer"], tokenizer_files(workdir), "tokenizer file")  # from this corpus
    if changes:
        more = f" (and {len(changes) - _SHOWN} more)" if len(changes) > _SHOWN else ""
        raise InputsChanged(f"workdir {workdir} was started from other inputs ({path}): {'; '.join(changes[:_SHOWN])}"
                            f"{more}; {FIX}")
    return True


def _renamed(recorded: dict[str, dict], corpus: dict[str, dict]) -> dict[str, dict]:
    """A record of corpus files by their configured paths, named as `corpus` names them: a recorded path
    takes the one name whose path under its source's root it ends with; the others keep their paths."""
    out = dict(recorded)
    for name in corpus:
        relative = name.split("/", 1)[1] if name.startswith("data.paths[") else name
        matches = [path for path in out if path not in corpus and (path == relative or path.endswith("/" + relative))]
        if len(matches) == 1:
            out[name] = out.pop(matches[0])
    return out


def record_inputs(workdir: str | os.PathLike, corpus: dict[str, dict]) -> None:
    """Writes `<workdir>/inputs.json`: the corpus files and the tokenizer's (temp, then rename)."""
    atomic_write_json(pathlib.Path(workdir) / rundir.INPUTS,
                      {"corpus": corpus, "tokenizer": tokenizer_files(workdir), "names": NAMES})
