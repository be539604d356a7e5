"""The two CogBench fMRI encoding tasks, word_fmri and fmri (discourse), with a layer sweep.

word_fmri (official split mode): every word of `{split}/word/word.txt` is encoded alone and
mean-pooled over its whole row (special tokens included). Ridge with intercept (sklearn
`Ridge`), alpha from logspace(-4, 4, 10) chosen by mean dev MSE over a subject's voxels,
fit on train, predict the evaluation split (test, or dev when there is no test). Per word:
Pearson r between predicted and true voxel patterns over the voxels that are not all zero
in the evaluation split (NaN -> 0); subject score = mean of the top k = max(1, int(0.1 n))
word correlations; task score = mean over subjects.

fmri: word features in context (see `features.py`), words with notPU `isvalid == 1` placed
at frame int(end * 100) of a 100 Hz grid, convolved with the SPM-style HRF
gamma.pdf(t, 6) - gamma.pdf(t, 16) / 6 (sum 1, 32 s, dt = 0.71 / 71 s), sampled every 71st
frame (TR 0.71 s) after dropping the first 19 TRs, cut to the reference TR count, z-scored.
Because the features are impulses, the convolve-then-sample chain is one [TRs, words]
matrix per story (`tr_sampling_matrix`), shared by all layers. Ridge without intercept on
the thin SVD of the training rows, as the official `ridge_multidim` (`ridge_form="svd"`,
components with s <= 1e-10 dropped: `rcond=0`), a in logspace(-3, 3, 10) with penalty a^2
(the official code shrinks S/(S^2+a^2)); one a per ROI x subject, chosen by the mean over
voxels of the dev correlation; refit on train; score = mean over voxels of the product of
z-scores on the evaluation split, z-scored with ddof 1 as the official `torch.std`
(`correlation_ddof=1`: Pearson r x (M - 1) / M for M TRs); task score = mean over
ROI x subject.

Choices the description leaves open (each a setting in configs/eval.py, `fmri.word_fmri.*` and
`fmri.fmri.*`; see `settings.WordFmriSettings` / `settings.FmriSettings`):
- word_fmri features are not row-standardised (that was the legacy no-split mode):
  `standardize_rows=False`.
- Context for story words: one line of the story, as the official code (`context="sentence"`),
  or the whole story (`"story"`), chunked to the model's max length either way.
- Story words are tokenized each on its own, as the official `is_split_into_words=True`
  (`features.py`).
- Ridge routes other than the official SVD: `ridge_form="primal"`/`"dual"` (eigh of a Gram
  matrix, faster on CPU; drops components below `rcond` x the largest, so it may pick
  another alpha on ill-conditioned features); `correlation_ddof=0` reports plain Pearson r.
- Words sharing a 100 Hz frame: the first one is placed, as the official loop does. The
  grid ends at int(last end * 100), so a word ending exactly there falls off, as officially
  (`include_last_word=False`). End times of valid words must not decrease (error otherwise).
- A story whose word times do not reach (reference TRs + 19) TRs is an error, not padded.
- Features are z-scored over the whole story matrix (one mean and std), as officially
  (`feature_zscore="matrix"`; `"column"` z-scores each feature).
- Alpha per voxel instead of per subject/ROI: `alpha_per_voxel=True` (not official).
- Layer sweep: `layers="all"` (embeddings = 0 ... final normed output = N) or a list; the
  official value in results.json is the layer `fmri.layer` (default -1 = the last).
"""
from __future__ import annotations

import pathlib
from typing import Any, Callable, Iterable, Iterator, Sequence

import matplotlib.figure
import numpy as np
import scipy.stats
from tqdm import tqdm

from babylm_jax.eval.fmri import cogbench, features, ridge
from babylm_jax.eval.results import TaskResult
from babylm_jax.config.evaluation import EvalSettings, FmriSettings, WordFmriSettings
from babylm_jax.tasks.registry import TaskSpec
from babylm_jax.eval.loaded import LoadedModel


def alphas(logspace: Sequence[float]) -> np.ndarray:
    low, high, count = logspace
    return np.logspace(low, high, int(count))


def layer_list(setting: tuple[int, ...] | None, num_layers: int, chosen: int) -> list[int]:
    """Layers to score (non-negative indices into the N+1 hidden states; None = all), always including `chosen`."""
    total = num_layers + 1
    wanted = range(total) if setting is None else setting
    out = set()
    for layer in [*wanted, chosen]:
        if not -total <= layer < total:
            raise ValueError(f"fMRI layer {layer} out of range for {total} hidden states (0..{num_layers} or negative)")
        out.add(layer % total)
    return sorted(out)


# ---------------------------------------------------------------------------- word_fmri

def top_fraction_mean(correlations: np.ndarray, fraction: float = 0.1) -> float:
    """Mean of the top k = max(1, int(fraction * n)) values."""
    k = max(1, int(fraction * len(correlations)))
    return float(np.mean(np.sort(correlations)[-k:]))


def word_pattern_correlations(pred_WxV: np.ndarray, true_WxV: np.ndarray) -> np.ndarray:
    """Pearson r per word between predicted and true patterns, over voxels not all zero; NaN -> 0."""
    valid = ~np.all(true_WxV == 0, axis=0)
    if not valid.any():
        return np.zeros(len(true_WxV))
    p = pred_WxV[:, valid].astype(np.float64)
    t = true_WxV[:, valid].astype(np.float64)
    p = p - p.mean(1, keepdims=True)
    t = t - t.mean(1, keepdims=True)
    denominator = np.sqrt((p * p).sum(1) * (t * t).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (p * t).sum(1) / denominator
    return np.nan_to_num(r, nan=0.0)


def score_word_fmri(x_NxD: np.ndarray, responses: dict[str, np.ndarray], train_N: np.ndarray, select_N: np.ndarray,
                    eval_N: np.ndarray, settings: WordFmriSettings) -> dict[str, dict[str, Any]]:
    """Per subject: {"score", "mean_word_r" (all words, not official), "alpha"}; rows of `x` and every response are the stacked splits."""
    if settings.standardize_rows:
        std = x_NxD.std(1, keepdims=True)
        x_NxD = (x_NxD - x_NxD.mean(1, keepdims=True)) / np.where(std == 0, 1.0, std)
    grid = alphas(settings.alpha_logspace)
    solver = ridge.RidgeSolver(x_NxD, train_N, fit_intercept=settings.fit_intercept, form=settings.ridge_form,
                               voxel_chunk=settings.voxel_chunk)
    out = {}
    for subject, y_NxV in responses.items():
        scores = solver.path_scores(y_NxV, select_N, grid, metric="mse")
        best = ridge.best_penalty_index(scores, "mse", per_voxel=settings.alpha_per_voxel)
        pred = solver.predict(y_NxV, eval_N, grid[best])[0]
        r = word_pattern_correlations(pred, y_NxV[eval_N])
        out[subject] = {"score": top_fraction_mean(r, settings.top_fraction), "mean_word_r": float(r.mean()),
                        "alpha": float(grid[best[0]]) if not settings.alpha_per_voxel else None}
    return out


def _stack_masks(counts: Sequence[int]) -> list[np.ndarray]:
    total, start, masks = sum(counts), 0, []
    for count in counts:
        mask = np.zeros(total, bool)
        mask[start:start + count] = True
        masks.append(mask)
        start += count
    return masks


def _splits_and_subjects(root: pathlib.Path, task: str, subjects_of: Callable[[str], list[str]]
                         ) -> tuple[tuple[str, str, str], list[str], list[str]]:
    """The (train, selection, evaluation) splits, the distinct ones in use, and the train split's
    subjects, each checked present in every split in use (FileNotFoundError names the missing)."""
    train, select, evaluate = cogbench.splits(root)
    used = list(dict.fromkeys([train, select, evaluate]))
    subjects = subjects_of(train)
    for split in used[1:]:
        missing = sorted(set(subjects) - set(subjects_of(split)))
        if missing:
            raise FileNotFoundError(f"{task}: subject(s) {missing} have no responses in split {split!r} under {root}")
    return (train, select, evaluate), used, subjects


def run_word_fmri(spec: TaskSpec, loaded: LoadedModel, data_dir: pathlib.Path, eval_settings: EvalSettings) -> TaskResult:
    """The word_fmri task on the CogBench root (`<data_dir>/cogbench/` or the official `cogbench-fmri-0415/`)."""
    settings = eval_settings.word_fmri
    root = spec.root(data_dir)
    (train, select, evaluate), used, subjects = _splits_and_subjects(
        root, "word_fmri", lambda split: cogbench.word_subjects(root, split))
    words = {s: cogbench.read_words(root, s) for s in used}
    responses = {}
    for subject in subjects:
        parts = [cogbench.read_word_responses(root, s, subject, len(words[s])) for s in used]
        if len({p.shape[1] for p in parts}) != 1:
            raise ValueError(f"word_fmri: subject {subject!r} has voxel counts {[p.shape[1] for p in parts]} "
                             f"across splits {used}; they must agree")
        responses[subject] = np.concatenate(parts)
    masks = dict(zip(used, _stack_masks([len(words[s]) for s in used])))
    all_words = [w for s in used for w in words[s]]
    family = loaded.model.config.family
    layers_LxWxD = features.word_features(loaded.model, loaded.params, loaded.tokenizer, family, all_words,
                                          progress="word_fmri features")
    chosen = eval_settings.fmri_layer
    sweep = layer_list(settings.layers, loaded.model.config.num_layers, chosen)
    per_layer = {}
    for layer in tqdm(sweep, desc="word_fmri layers"):
        per_layer[layer] = score_word_fmri(layers_LxWxD[layer], responses, masks[train], masks[select],
                                           masks[evaluate], settings)
    chosen %= loaded.model.config.num_layers + 1
    layer_means = {layer: float(np.mean([v["score"] for v in r.values()])) for layer, r in per_layer.items()}
    details = {
        "layer": chosen, "evaluation_split": evaluate, "num_words": {s: len(words[s]) for s in used},
        "per_subject": {s: v["score"] for s, v in per_layer[chosen].items()},
        "mean_word_r": {s: v["mean_word_r"] for s, v in per_layer[chosen].items()},
        "alphas": {s: v["alpha"] for s, v in per_layer[chosen].items()},
        "layer_sweep": {str(k): v for k, v in layer_means.items()},
    }
    return TaskResult({"mean": layer_means[chosen]}, details, {"layers": layer_figure("word_fmri", layer_means, chosen)})


# ---------------------------------------------------------------------------- fmri

def spm_hrf(tr: float = 0.71, oversampling: int = 71, length_s: float = 32.0) -> np.ndarray:
    """SPM-style double gamma, gamma.pdf(t, 6) - gamma.pdf(t, 16) / 6, sampled every tr / oversampling s, sum 1."""
    t = np.arange(0, length_s, tr / oversampling)
    hrf = scipy.stats.gamma.pdf(t, 6) - scipy.stats.gamma.pdf(t, 16) / 6
    total = hrf.sum()
    return (hrf / total if total != 0 else hrf).astype(np.float32)


def tr_sampling_matrix(timing: cogbench.StoryTiming, hrf: np.ndarray, settings: FmriSettings,
                       where: str = "story") -> np.ndarray:
    """[reference TRs, words] map from word features to HRF-convolved, TR-sampled, shifted features.

    Equal to placing each kept word's feature on the grid, `np.convolve` with the HRF, cutting
    at the grid length, taking every `oversampling`-th frame and dropping `skip_trs`.
    """
    num_words = timing.end_W.size
    kept = np.flatnonzero(timing.valid_W)
    matrix = np.zeros((timing.reference_trs, num_words), np.float32)
    if kept.size == 0:
        return matrix
    frames = (timing.end_W[kept] * settings.grid_hz).astype(np.int64)
    if np.any(np.diff(frames) < 0):
        raise ValueError(f"{where}: word end times of valid words decrease; they must be in order")
    grid_length = int(frames[-1]) + (1 if settings.include_last_word else 0)
    available = -(-grid_length // settings.oversampling) - settings.skip_trs
    if available < timing.reference_trs:
        raise ValueError(f"{where}: word times cover {max(available, 0)} TRs after dropping {settings.skip_trs}, "
                         f"but the reference (node_count_bu) has {timing.reference_trs}")
    first = np.ones(kept.size, bool)
    first[1:] = frames[1:] != frames[:-1]  # the first word at a frame wins
    place = first & (frames < grid_length)
    sample_frames = (np.arange(timing.reference_trs) + settings.skip_trs) * settings.oversampling
    lag = sample_frames[:, None] - frames[None, place]
    inside = (lag >= 0) & (lag < hrf.size)
    matrix[:, kept[place]] = np.where(inside, hrf[np.clip(lag, 0, hrf.size - 1)], 0.0)
    return matrix


def zscore_features(x_TxD: np.ndarray, mode: str) -> np.ndarray:
    """Z-score over the whole matrix ("matrix", official) or per column ("column"); zero std -> centred only."""
    axis = None if mode == "matrix" else 0
    mean, std = x_TxD.mean(axis=axis, keepdims=True), x_TxD.std(axis=axis, keepdims=True)
    return ((x_TxD - mean) / np.where(std == 0, 1.0, std)).astype(np.float32)


def story_design(words_LxWxD: np.ndarray, timing: cogbench.StoryTiming, hrf: np.ndarray, settings: FmriSettings,
                 where: str = "story") -> np.ndarray:
    """[layers, reference TRs, D]: word features through grid, HRF, TR sampling and shift; z-scored."""
    sampling = tr_sampling_matrix(timing, hrf, settings, where)
    design = np.einsum("tw,lwd->ltd", sampling, words_LxWxD)
    return np.stack([zscore_features(x, settings.feature_zscore) for x in design])


def score_fmri(x_by_layer: dict[int, np.ndarray], groups: Iterable[tuple[str, np.ndarray]], train_N: np.ndarray,
               select_N: np.ndarray, eval_N: np.ndarray, settings: FmriSettings) -> dict[str, dict[int, dict]]:
    """Per group (ROI x subject) and layer: {"score", "alpha"}. One decomposition per layer serves all groups."""
    grid = alphas(settings.alpha_logspace)
    penalties = grid ** settings.penalty_power
    solvers = {layer: ridge.RidgeSolver(x, train_N, fit_intercept=settings.fit_intercept, form=settings.ridge_form,
                                        rcond=settings.rcond, voxel_chunk=settings.voxel_chunk)
               for layer, x in x_by_layer.items()}
    out: dict[str, dict[int, dict]] = {}
    for name, y_NxV in groups:
        out[name] = {}
        for layer, solver in solvers.items():
            scores = solver.path_scores(y_NxV, select_N, penalties, metric="corr")
            best = ridge.best_penalty_index(scores, "corr", per_voxel=settings.alpha_per_voxel)
            pred = solver.predict(y_NxV, eval_N, penalties[best])[0]
            r = np.asarray(ridge.column_correlation(pred, y_NxV[eval_N], np.ones(int(eval_N.sum()), bool),
                                                    ddof=settings.correlation_ddof))
            out[name][layer] = {"score": float(r.mean()),
                                "alpha": None if settings.alpha_per_voxel else float(grid[best[0]])}
    return out


def _group_responses(root: pathlib.Path, used: list[str], stories: dict[str, list[int]], trs: dict, rois: Sequence[str],
                     subjects: list[str]) -> Iterator[tuple[str, np.ndarray]]:
    """("ROI/subject", responses [all TRs of all splits, voxels]) one group at a time."""
    for roi in rois:
        for subject in tqdm(subjects, desc=f"fmri ridge ({roi})"):
            parts = [cogbench.read_story_response(root, s, roi, subject, i, trs[s, i]) for s in used for i in stories[s]]
            if len({p.shape[1] for p in parts}) != 1:
                raise ValueError(f"fmri: ROI {roi!r}, subject {subject!r}: voxel counts differ between stories "
                                 f"({sorted({p.shape[1] for p in parts})})")
            yield f"{roi}/{subject}", np.concatenate(parts)


def run_fmri(spec: TaskSpec, loaded: LoadedModel, data_dir: pathlib.Path, eval_settings: EvalSettings) -> TaskResult:
    """The discourse fmri task on the CogBench root (`<data_dir>/cogbench/` or the official `cogbench-fmri-0415/`)."""
    settings = eval_settings.fmri
    root = spec.root(data_dir)
    (train, select, evaluate), used, subjects = _splits_and_subjects(
        root, "fmri", lambda split: cogbench.fmri_subjects(root, split, settings.rois))
    stories = {s: cogbench.story_ids(root, s) for s in used}
    texts, timings = {}, {}
    for split in used:  # read and check every side file before the model runs
        for story_id in stories[split]:
            texts[split, story_id] = cogbench.read_story(root, split, story_id)
            num_words = sum(len(line) for line in texts[split, story_id])
            timings[split, story_id] = cogbench.read_story_timing(root, split, story_id, num_words)
    hrf = spm_hrf(settings.tr, settings.oversampling, settings.hrf_length_s)
    model, family = loaded.model, loaded.model.config.family
    designs = []
    for (split, story_id), lines in tqdm(texts.items(), desc="fmri features"):
        contexts = lines if settings.context == "sentence" else [[w for line in lines for w in line]]
        words_LxWxD = features.story_word_features(model, loaded.params, loaded.tokenizer, family, contexts)
        designs.append(story_design(words_LxWxD, timings[split, story_id], hrf, settings,
                                    where=f"{root / split}/story_{story_id}"))
    x_LxNxD = np.concatenate(designs, axis=1)
    trs = {key: timing.reference_trs for key, timing in timings.items()}
    masks = dict(zip(used, _stack_masks([sum(trs[s, i] for i in stories[s]) for s in used])))
    chosen = eval_settings.fmri_layer
    num_layers = model.config.num_layers
    sweep = layer_list(settings.layers, num_layers, chosen)
    groups = score_fmri({layer: x_LxNxD[layer] for layer in sweep},
                        _group_responses(root, used, stories, trs, settings.rois, subjects),
                        masks[train], masks[select], masks[evaluate], settings)
    chosen %= num_layers + 1
    layer_means = {layer: float(np.mean([g[layer]["score"] for g in groups.values()])) for layer in sweep}
    details = {
        "layer": chosen, "evaluation_split": evaluate, "num_stories": {s: len(stories[s]) for s in used},
        "per_roi_subject": {name: g[chosen]["score"] for name, g in groups.items()},
        "per_roi": {roi: float(np.mean([g[chosen]["score"] for name, g in groups.items() if name.startswith(roi + "/")]))
                    for roi in settings.rois},
        "alphas": {name: g[chosen]["alpha"] for name, g in groups.items()},
        "layer_sweep": {str(k): v for k, v in layer_means.items()},
    }
    return TaskResult({"mean": layer_means[chosen]}, details, {"layers": layer_figure("fmri", layer_means, chosen)})


def layer_figure(task: str, layer_means: dict[int, float], chosen: int) -> matplotlib.figure.Figure:
    """Score per layer, the reported layer marked."""
    figure = matplotlib.figure.Figure(figsize=(6, 3.5))
    axes = figure.add_subplot()
    layers = sorted(layer_means)
    axes.plot(layers, [layer_means[k] for k in layers], marker="o", color="#4c72b0")
    axes.axvline(chosen, color="grey", linestyle="--", linewidth=1, label=f"reported layer {chosen}")
    axes.set_xlabel("hidden state (0 = embeddings)")
    axes.set_ylabel("score (mean Pearson r)")
    axes.set_title(f"{task}: score per layer")
    axes.legend()
    figure.tight_layout()
    return figure
