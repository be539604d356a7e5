"""Readers of the official CogBench fMRI layout (MulCogBench, Chinese), with checks.

Root: `<data_dir>/cogbench/`, holding split folders `train/`, `dev/` and, once released,
`test/`. Inside a split:

    word/word.txt                                      one word per line (blank lines skipped)
    word_fmri/<subject>_selected.mat                   "examples": words x voxels
    story/story_<id>.txt                               one sentence per line, words space-separated
    word_time_features_postprocess/story_<id>_word_time.mat   "end": word end times (s)
    notPU/story_<id>.mat                               "isvalid": 1 = keep the word (not punctuation)
    node_count_bu/story_<id>.mat                       "word_feature": reference TR count = MATLAB dim 0
    fmri/<ROI>/<subject>/story_<id>.mat                "fmri_response": voxels x TRs

Choices the official description leaves open (documented here, enforced below):
- The three story side files (word times, notPU, node_count_bu) are read from the split
  folder, or from the cogbench root when the split folder lacks them.
- `.mat` files are read with scipy; MATLAB v7.3 (HDF5) files with h5py, transposed back to
  MATLAB's orientation (h5py sees MATLAB arrays reversed). So the reference TR count is
  `word_feature`'s MATLAB dim 0, which is the `shape[1]` the official code reads via h5py.
- Responses with NaN or infinite values are refused (naming the file), not silently zeroed.
- Shapes and dtypes the official code relies on are checked, each with an error naming the
  file: word end times 1 x words (it reads `end[0, valid]`), notPU `isvalid` words x 1 (it
  reads `np.where(isvalid == 1)[0]`, which on a 1 x words row silently keeps only word 0),
  discourse `fmri_response` in float32 (float64 fails its float32 ridge), node_count_bu as
  MATLAB v7.3 (it opens them with h5py).
"""
from __future__ import annotations

import dataclasses
import pathlib
import re

import h5py
import numpy as np
import scipy.io

from babylm_jax.core.jsonl import read_text
from babylm_jax.tasks.formats import COGBENCH_ROIS

_STORY = re.compile(r"^story_(\d+)\.txt$")
_WORD_SUBJECT = re.compile(r"^(.+)_selected\.mat$")


def load_mat_array(path: pathlib.Path, key: str) -> np.ndarray:
    """Array `key` of a .mat file (v5 via scipy, v7.3 via h5py) in MATLAB orientation."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"missing file {path}")
    if h5py.is_hdf5(path):  # MATLAB v7.3
        with h5py.File(path, "r") as handle:
            if key not in handle:
                raise KeyError(f"{path}: no key {key!r}; keys: {sorted(handle.keys())}")
            return np.asarray(handle[key]).T
    try:
        contents = scipy.io.loadmat(str(path))
    except (ValueError, TypeError, OSError) as error:
        raise ValueError(f"{path}: not a readable .mat file ({error})") from error
    if key not in contents:
        keys = sorted(k for k in contents if not k.startswith("__"))
        raise KeyError(f"{path}: no key {key!r}; keys: {keys}")
    return np.asarray(contents[key])


def _finite(array: np.ndarray, path: pathlib.Path) -> np.ndarray:
    array = np.asarray(array, np.float32)
    bad = ~np.isfinite(array)
    if bad.any():
        raise ValueError(f"{path}: {int(bad.sum())} NaN/infinite values in the responses (shape {array.shape})")
    return array


def splits(root: pathlib.Path) -> tuple[str, str, str]:
    """(train, selection, evaluation) split names: evaluation is "test" when present, else "dev"."""
    root = pathlib.Path(root)
    for name in ("train", "dev"):
        if not (root / name).is_dir():
            raise FileNotFoundError(f"CogBench split folder {root / name} does not exist")
    return "train", "dev", "test" if (root / "test").is_dir() else "dev"


def read_words(root: pathlib.Path, split: str) -> list[str]:
    """The split's words, in the order of the response rows."""
    path = pathlib.Path(root) / split / "word" / "word.txt"
    if not path.is_file():
        raise FileNotFoundError(f"missing word list {path}")
    return [line.strip() for line in read_text(path).splitlines() if line.strip()]


def word_subjects(root: pathlib.Path, split: str) -> list[str]:
    """Subjects with a `<subject>_selected.mat` file in the split, sorted."""
    folder = pathlib.Path(root) / split / "word_fmri"
    subjects = sorted(m.group(1) for p in folder.glob("*_selected.mat") if (m := _WORD_SUBJECT.match(p.name)))
    if not subjects:
        raise FileNotFoundError(f"no <subject>_selected.mat files in {folder}")
    return subjects


def read_word_responses(root: pathlib.Path, split: str, subject: str, num_words: int) -> np.ndarray:
    """Responses [words, voxels] of one subject; the row count must equal the word list's."""
    path = pathlib.Path(root) / split / "word_fmri" / f"{subject}_selected.mat"
    if not path.is_file():
        raise FileNotFoundError(f"subject {subject!r} has no word_fmri responses in split {split!r}: missing {path}")
    examples = load_mat_array(path, "examples")
    if examples.ndim != 2 or examples.shape[0] != num_words:
        raise ValueError(
            f"{path}: 'examples' has shape {examples.shape} but {split}/word/word.txt lists {num_words} words "
            "(expected words x voxels)"
        )
    return _finite(examples, path)


def story_ids(root: pathlib.Path, split: str) -> list[int]:
    """Ids of `story_<id>.txt` in the split, in numeric order."""
    folder = pathlib.Path(root) / split / "story"
    ids = sorted(int(m.group(1)) for p in folder.glob("story_*.txt") if (m := _STORY.match(p.name)))
    if not ids:
        raise FileNotFoundError(f"no story_<id>.txt files in {folder}")
    return ids


def read_story(root: pathlib.Path, split: str, story_id: int) -> list[list[str]]:
    """The story's sentences, each a list of words (blank lines skipped)."""
    path = pathlib.Path(root) / split / "story" / f"story_{story_id}.txt"
    return [line.split() for line in read_text(path).splitlines() if line.split()]


@dataclasses.dataclass(frozen=True)
class StoryTiming:
    """Word end times (s) and notPU validity for every word of a story, and the reference TR count."""

    end_W: np.ndarray
    valid_W: np.ndarray
    reference_trs: int


def _side_file(root: pathlib.Path, split: str, *parts: str) -> pathlib.Path:
    in_split = pathlib.Path(root, split, *parts)
    return in_split if in_split.is_file() or not pathlib.Path(root, *parts).is_file() else pathlib.Path(root, *parts)


def read_story_timing(root: pathlib.Path, split: str, story_id: int, num_words: int) -> StoryTiming:
    """Timing of one story, checked against its word count."""
    time_path = _side_file(root, split, "word_time_features_postprocess", f"story_{story_id}_word_time.mat")
    valid_path = _side_file(root, split, "notPU", f"story_{story_id}.mat")
    ref_path = _side_file(root, split, "node_count_bu", f"story_{story_id}.mat")
    end = load_mat_array(time_path, "end")
    valid = load_mat_array(valid_path, "isvalid")
    reference = load_mat_array(ref_path, "word_feature")
    if not h5py.is_hdf5(ref_path):
        raise ValueError(f"{ref_path}: not a MATLAB v7.3 (HDF5) file; the official code reads node_count_bu with h5py")
    for path, array in ((time_path, end), (valid_path, valid)):
        if array.size != num_words:
            raise ValueError(f"{path}: {array.size} entries but story_{story_id}.txt in {split} has {num_words} words")
    if end.shape != (1, num_words):
        raise ValueError(f"{time_path}: 'end' has shape {end.shape}; the official code reads a 1 x {num_words} row "
                         "(end[0, valid])")
    if valid.shape != (num_words, 1):
        raise ValueError(f"{valid_path}: 'isvalid' has shape {valid.shape}; the official code reads a {num_words} x 1 "
                         "column (np.where(isvalid == 1)[0] on a row keeps only the first word)")
    end, valid = end.astype(np.float64).reshape(-1), valid.reshape(-1) == 1
    if not np.isfinite(end[valid]).all():
        raise ValueError(f"{time_path}: NaN/infinite end times for valid words")
    if reference.ndim != 2:
        raise ValueError(f"{ref_path}: 'word_feature' must be 2-D (TRs x features), got shape {reference.shape}")
    return StoryTiming(end, valid, int(reference.shape[0]))


def fmri_subjects(root: pathlib.Path, split: str, rois: tuple[str, ...] = COGBENCH_ROIS) -> list[str]:
    """Subjects of the discourse fMRI data; every ROI must have the same ones (else say which are missing)."""
    per_roi = {}
    for roi in rois:
        folder = pathlib.Path(root) / split / "fmri" / roi
        if not folder.is_dir():
            raise FileNotFoundError(f"ROI {roi!r} is missing: no folder {folder}")
        per_roi[roi] = sorted(p.name for p in folder.iterdir() if p.is_dir())
    everyone = sorted(set().union(*per_roi.values()))
    if not everyone:
        raise FileNotFoundError(f"no subject folders under {pathlib.Path(root) / split / 'fmri'}/<ROI>/")
    for roi, subjects in per_roi.items():
        missing = sorted(set(everyone) - set(subjects))
        if missing:
            raise FileNotFoundError(f"split {split!r}, ROI {roi!r}: subject(s) {missing} missing (others have them)")
    return everyone


def read_story_response(root: pathlib.Path, split: str, roi: str, subject: str, story_id: int,
                        reference_trs: int) -> np.ndarray:
    """Responses [TRs, voxels] of one story (the file holds voxels x TRs); TR count checked."""
    path = pathlib.Path(root) / split / "fmri" / roi / subject / f"story_{story_id}.mat"
    if not path.is_file():
        raise FileNotFoundError(f"ROI {roi!r}, subject {subject!r}: missing story {story_id} in split {split!r} ({path})")
    response = load_mat_array(path, "fmri_response")
    if response.dtype != np.float32:
        raise ValueError(f"{path}: 'fmri_response' is {response.dtype}; the official code needs float32 "
                         "(its ridge multiplies it with float32 features)")
    if response.ndim != 2 or response.shape[1] != reference_trs:
        raise ValueError(
            f"{path}: 'fmri_response' has shape {response.shape}; expected voxels x {reference_trs} TRs "
            f"(the reference TR count of story {story_id} from node_count_bu)"
        )
    return _finite(response, path).T
