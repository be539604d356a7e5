"""The vocabulary a checkpoint was trained with: recorded in every checkpoint's meta, checked wherever it is read.

    meta[VOCABULARY] = vocabulary_record(tokenizer)    # at every save (corpus.tokenizer)
    check_vocabulary(meta, vocabulary, where, fix)       # at a resume, an evaluation, an export
    prepare_corpus(..., check_tokenizer=resumable(...))  # a trained workdir: before its tokenizer/ is replaced

The ids of a model's embeddings mean the pieces of the tokenizer it was trained with. A workdir whose
tokenizer/ was rebuilt from a changed corpus (a run without inputs.json, or copied without it), replaced
by another run's or damaged gives other pieces those ids: such a checkpoint is refused, naming both
vocabularies, never trained on or scored as if nothing had changed. A checkpoint older than the record
(no VOCABULARY in its meta) is accepted as it is, with one line where a run resumes.
"""
from __future__ import annotations

import json
import pathlib
from typing import Callable

from etils import epath

from babylm_jax.core import rundir
from babylm_jax.corpus.tokenizer import Tokenizer, describe_vocabulary, vocabulary_record
from babylm_jax.corpus.tokenizer_kinds import load_tokenizer
from babylm_jax.training.run_config import CheckpointError

VOCABULARY = "vocabulary"  # the key of a checkpoint's meta that holds its tokenizer's vocabulary_record
RESUME_FIX = ("give data.corpus and data.paths the corpus it was trained on (its tokenizer is rebuilt from it), or "
              "start a new --workdir")


def check_vocabulary(meta: dict, now: dict, where: str, fix: str,
                     tokenizer: str = "the tokenizer of this run's corpus and settings") -> bool:
    """Whether the checkpoint at `where` (its `meta`) records its vocabulary; CheckpointError, naming both
    vocabularies and `fix`, where it is not `now` (the `vocabulary_record` of `tokenizer`, in words)."""
    saved = meta.get(VOCABULARY)
    if not isinstance(saved, dict):
        return False
    if saved.get("fingerprint") != now["fingerprint"]:
        trained = describe_vocabulary(saved) if {"kind", "ids", "fingerprint"} <= saved.keys() else repr(saved)[:200]
        raise CheckpointError(f"checkpoint {where} was trained with {trained}, but {tokenizer} is "
                              f"{describe_vocabulary(now)}: its ids would mean other pieces; {fix}")
    return True


def unrecorded_line(where: str) -> str:
    """The one line of a resume from a checkpoint written before checkpoints recorded their vocabulary."""
    return (f"checkpoint {where} does not record the vocabulary it was trained with (written by an older "
            "babylm_jax): resumed with the workdir's tokenizer as it is; every checkpoint from now on records it")


def trained_vocabulary(checkpoints_at: str, workdir: str | pathlib.Path) -> tuple[str, dict] | None:
    """(where, vocabulary) of the newest checkpoint under `checkpoints_at`: its record or, for a checkpoint
    older than the record, the workdir's tokenizer/ as it is (the one the run last used); None where there is
    no checkpoint, or neither can be read (the restore then names what is damaged)."""
    steps = rundir.checkpoint_steps(checkpoints_at)
    if not steps:
        return None
    step = max(steps)
    where = f"{steps[step]}/{step}"
    try:  # orbax's JsonSave writes an item's JSON to <item>/metadata
        record = json.loads((epath.Path(where) / "meta" / "metadata").read_text()).get(VOCABULARY)
    except (OSError, ValueError, AttributeError):
        record = None
    if isinstance(record, dict) and "fingerprint" in record:
        return where, record
    try:
        return where, vocabulary_record(load_tokenizer(pathlib.Path(workdir) / rundir.TOKENIZER))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resumable(trained: tuple[str, dict] | None) -> Callable[[Tokenizer], None] | None:
    """What prepare runs on the tokenizer it made for a trained workdir, before that replaces the workdir's
    tokenizer/: refuses one of another vocabulary than `trained` (`trained_vocabulary`)."""
    if trained is None:
        return None
    where, vocabulary = trained

    def check(tokenizer: Tokenizer) -> None:
        check_vocabulary({VOCABULARY: vocabulary}, vocabulary_record(tokenizer), where, RESUME_FIX)

    return check
