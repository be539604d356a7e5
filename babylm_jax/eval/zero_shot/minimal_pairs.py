"""Zero-shot minimal pairs: readers for the task formats, accuracy per UID, and the task runner.

An item is correct when score(good) >= score(bad) (official: ties count as correct);
the strict number counts ties as wrong. Hanzi tasks only: when the tokenizer has an UNK id
and either sentence contains it, the item is wrong in both numbers. The task score is the
mean over UIDs of the per-UID accuracy (macro average).
"""
from __future__ import annotations

import dataclasses
import logging
import pathlib
import weakref
from typing import Any, Sequence

import numpy as np

from babylm_jax.core.families import Scoring, family_spec
from babylm_jax.core.jsonl import read_jsonl, text_field
from babylm_jax.tasks.formats import PAIR_FORMATS, pair_fields
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.eval.zero_shot import scoring
from babylm_jax.eval.results import TaskResult, phenomenon_figure
from babylm_jax.config.evaluation import EvalSettings, ScoringSettings
from babylm_jax.tasks.registry import TaskSpec
from babylm_jax.eval.loaded import LoadedModel

@dataclasses.dataclass(frozen=True)
class Pair:
    good: str
    bad: str
    uid: str
    phenomenon: str
    source: str = ""  # file:line it was read from


def read_pairs(files: Sequence[pathlib.Path], format_name: str, limit: int | None = None) -> list[Pair]:
    """Pairs from JSONL `files` in order (the first `limit` when given); fields as tasks/formats.py says.

    Blank lines are skipped; a line that is not a JSON object, lacks a field, has an empty
    sentence or the same sentence twice raises ValueError naming the file and line. xcomps files without a UID field are one UID each
    (the file stem). Hanzi files may hold either the hub fields (task/meta_structure, condition)
    or the prepared ones (UID, phenomenon), row by row.
    """
    if format_name not in PAIR_FORMATS:
        raise ValueError(f"unknown minimal-pair format {format_name!r}; known: {sorted(PAIR_FORMATS)}")
    pairs: list[Pair] = []
    for path in files:
        before = len(pairs)
        for line_number, row in read_jsonl(path):
            if limit is not None and len(pairs) >= limit:
                return pairs
            where = f"{path}:{line_number}"
            fields = pair_fields(format_name, row)
            for needed in (fields.good, fields.bad, fields.uid, fields.phenomenon):
                if needed is not None and needed not in row:
                    raise ValueError(f"{where}: missing field {needed!r}")
            for needed in (fields.good, fields.bad):
                if not text_field(row, needed, where).strip():
                    raise ValueError(f"{where}: field {needed!r} is empty; a minimal pair needs two sentences")
            if row[fields.good] == row[fields.bad]:
                raise ValueError(f"{where}: fields {fields.good!r} and {fields.bad!r} hold the same sentence "
                                 f"{row[fields.good]!r}; a minimal pair needs two that differ")
            uid = str(row[fields.uid]) if fields.uid else path.stem
            phenomenon = str(row[fields.phenomenon]) if fields.phenomenon else uid
            pairs.append(Pair(row[fields.good], row[fields.bad], uid, phenomenon, where))
        if len(pairs) == before:
            logging.warning("%s holds no minimal pairs (an empty file?): it adds nothing to the score", path)
    _say_repeats(pairs)
    return pairs


def _say_repeats(pairs: Sequence[Pair]) -> None:
    """One warning where the same pair (UID and both sentences) is read more than once: each copy counts, as
    in the official pipeline, so a file copied twice into the data weighs its items twice."""
    first: dict[tuple[str, str, str], str] = {}
    repeats = []
    for pair in pairs:
        key = (pair.uid, pair.good, pair.bad)
        if key in first:
            repeats.append((first[key], pair.source))
        else:
            first[key] = pair.source
    if repeats:
        logging.warning("%d minimal pairs are read more than once (first: %s again at %s); each copy counts, as in "
                        "the official pipeline", len(repeats), *repeats[0])


def pair_accuracy(
    good_scores: np.ndarray,
    bad_scores: np.ndarray,
    uids: Sequence[str],
    phenomena: Sequence[str],
    forced_wrong: np.ndarray | None = None,
) -> dict[str, Any]:
    """Accuracy (ties correct) and strict accuracy (ties wrong), each macro-averaged over UIDs.

    `forced_wrong` marks items scored wrong whatever their scores (the hanzi UNK rule).
    Per-phenomenon numbers are the mean of their UIDs' accuracies.
    """
    good, bad = np.asarray(good_scores, np.float64), np.asarray(bad_scores, np.float64)
    wrong = np.zeros(len(good), bool) if forced_wrong is None else np.asarray(forced_wrong, bool)
    correct = (good >= bad) & ~wrong
    correct_strict = (good > bad) & ~wrong
    uid_array = np.asarray(uids)
    per_uid, per_uid_strict, uid_phenomenon = {}, {}, {}
    for uid in dict.fromkeys(uids):
        rows = uid_array == uid
        per_uid[uid] = float(correct[rows].mean())
        per_uid_strict[uid] = float(correct_strict[rows].mean())
        uid_phenomenon[uid] = phenomena[int(np.argmax(rows))]
    per_phenomenon: dict[str, list[float]] = {}
    for uid, phenomenon in uid_phenomenon.items():
        per_phenomenon.setdefault(phenomenon, []).append(per_uid[uid])
    return {
        "accuracy": float(np.mean(list(per_uid.values()))),
        "accuracy_strict": float(np.mean(list(per_uid_strict.values()))),
        "num_items": int(len(good)),
        "num_uids": len(per_uid),
        "num_ties": int((good == bad).sum()),
        "num_forced_wrong": int(wrong.sum()),
        "per_uid": per_uid,
        "per_uid_strict": per_uid_strict,
        "per_phenomenon": {p: float(np.mean(a)) for p, a in per_phenomenon.items()},
    }


def word_ids_for(tokenizer: Tokenizer, text: str, num_tokens: int) -> list[int]:
    """The jieba word index of each token of `text` (by the token's first character)."""
    from babylm_jax.corpus.words import jieba_words

    ids, spans = tokenizer.encode_with_offsets(text)
    if len(ids) != num_tokens:
        raise ValueError(f"tokenizer offsets disagree with encode() for {text!r}")
    word_end = np.cumsum([len(w) for w in jieba_words(text)])
    return [int(np.searchsorted(word_end, start, side="right")) for start, _ in spans]


def score_pairs(
    scorer: scoring.SentenceScorer,
    tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    within_word_l2r: bool = False,
    progress: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(good scores, bad scores, contains-UNK per item) for `pairs`; one kernel call for all (`progress`: its bar)."""
    texts = [p.good for p in pairs] + [p.bad for p in pairs]
    ids = [tokenizer.encode(t) for t in texts]
    framing = family_spec(scorer.model.config.family).framing
    inputs = [framing.scoring_input(x) for x in ids]
    max_len = scorer.model.config.max_len
    for i, x in enumerate(inputs):
        if len(x) > max_len:
            pair, which = pairs[i % len(pairs)], "good" if i < len(pairs) else "bad"
            raise ValueError(f"{pair.source or 'a minimal pair'}: the {which} sentence needs {len(x)} tokens, more "
                             f"than the model's max_len={max_len}; shorten it or drop the pair")
    word_ids = None
    if within_word_l2r and scorer.variant is not Scoring.CAUSAL:
        word_ids = [word_ids_for(tokenizer, t, len(x)) for t, x in zip(texts, ids)]
    scores = scorer.score(inputs, word_ids, progress=progress)
    unk = tokenizer.unk_id
    has_unk = np.asarray([unk is not None and unk in x for x in ids], bool)
    n = len(pairs)
    return scores[:n], scores[n:], has_unk[:n] | has_unk[n:]


# One scorer per loaded model and shape, so the minimal-pair tasks share compiled kernels;
# entries go when their model does.
_SCORERS: weakref.WeakKeyDictionary[LoadedModel, dict[tuple[int, int], scoring.SentenceScorer]] = (
    weakref.WeakKeyDictionary())


def scorer_for(loaded: LoadedModel, settings: ScoringSettings) -> scoring.SentenceScorer:
    """The (cached) scorer of `loaded` with the batch size and row length of `settings`."""
    scorers = _SCORERS.setdefault(loaded, {})
    key = (settings.batch_size, settings.row_len)
    if key not in scorers:
        scorers[key] = scoring.SentenceScorer(
            loaded.model, loaded.params, family_spec(loaded.model.config.family).scoring,
            loaded.tokenizer.mask_id, batch_size=settings.batch_size, row_len=settings.row_len,
        )
    return scorers[key]


def evaluate_pairs(
    scorer: scoring.SentenceScorer,
    tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    unk_is_wrong: bool,
    within_word_l2r: bool = False,
    progress: str | None = None,
) -> dict[str, Any]:
    """Scores `pairs` and returns the accuracy dict of `pair_accuracy` plus the scoring variant."""
    good, bad, has_unk = score_pairs(scorer, tokenizer, pairs, within_word_l2r, progress)
    stats = pair_accuracy(good, bad, [p.uid for p in pairs], [p.phenomenon for p in pairs],
                          has_unk if unk_is_wrong else None)
    name = scoring.scoring_name(scorer.model.config.family, within_word_l2r)
    return {**stats, "scoring": name, "unk_rule": bool(unk_is_wrong)}


def run_minimal_pairs(spec: TaskSpec, loaded: LoadedModel, data_dir: pathlib.Path,
                      settings: EvalSettings) -> TaskResult:
    """Registry runner for every minimal-pair task (`spec.pair_format`, `spec.unk_is_wrong`)."""
    files = spec.find_files(data_dir)
    pairs = read_pairs(files, spec.pair_format, settings.limit)
    if not pairs:
        raise ValueError(f"task {spec.name}: no pairs in {', '.join(str(f) for f in files)}")
    stats = evaluate_pairs(scorer_for(loaded, settings.scoring), loaded.tokenizer, pairs, spec.unk_is_wrong,
                           settings.scoring.within_word_l2r, progress=f"{spec.name}: scoring {2 * len(pairs):,} sentences")
    figure = phenomenon_figure(f"{spec.name}: accuracy per phenomenon", stats["per_phenomenon"])
    return TaskResult({"accuracy": stats["accuracy"]}, stats, {"per_phenomenon": figure})
