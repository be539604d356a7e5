"""Ridge regression in JAX for fMRI encoding: one decomposition per fold, every penalty from it.

    solver = RidgeSolver(X_NxP, train_masks_FxN, fit_intercept=True)
    scores_FxAxV = solver.path_scores(Y_NxV, eval_masks_FxN, penalties_A, metric="mse")
    pred_FxMxV = solver.predict(Y_NxV, eval_masks_FxN, penalties_V)

Rows of `X` and `Y` are samples (all splits stacked); a fold is a boolean row mask of its
training rows, so every fold has the same static shapes and the folds `vmap`. Rows outside
the mask are zeroed before the decomposition and never touch the fit. Evaluation rows are
another mask per fold (gathered to a fixed count M, padding masked out of the scores).

Math (penalty `a` is sklearn's `alpha`: minimise |Xw - y|^2 + a |w|^2), Xc = centred training rows:
- "primal" (default when features <= training rows): eigh of Xc^T Xc = V S^2 V^T; W = V, US = Xc V.
- "dual" (default when features > training rows): eigh of Xc Xc^T = U S^2 U^T; W = Xc^T U, US = U.
- "svd": thin SVD Xc = U S V^T (the official fmri code's route; slower on CPU, more precise
  for ill-conditioned features); W = V, US = U S.
Every form predicts evaluation rows E as `(E - x_mean) W diag(1 / (s^2 + a)) US^T (Y - y_mean)
+ y_mean`, so each extra penalty costs one [M, K] x [K, V] product. Scores per voxel are
reduced as soon as one penalty's predictions exist: the code never holds an
[penalties, samples, voxels] tensor. Voxels go through in fixed-size chunks (one compile).
Components with s <= max(1e-10, rcond * s_max) ("svd") or s^2 <= rcond * s_max^2 (Gram
forms) are dropped: 1e-10 is the official floor, `rcond` guards float32 round-off (a Gram
matrix squares the condition number, as sklearn's float32 Cholesky solver also does).
With `fit_intercept`, X and Y are centred on the training rows' means, as sklearn `Ridge`.
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from babylm_jax.config.evaluation import RIDGE_FORMS

SCORE_METRICS = ("mse", "corr")  # how path_scores scores a penalty per voxel: mean squared error or Pearson r


def contiguous_folds(num_rows: int, num_folds: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_masks_FxN, eval_masks_FxN) of sklearn `KFold(num_folds, shuffle=False)`."""
    if not 2 <= num_folds <= num_rows:
        raise ValueError(f"need 2 <= num_folds <= rows, got {num_folds} folds for {num_rows} rows")
    sizes = np.full(num_folds, num_rows // num_folds)
    sizes[: num_rows % num_folds] += 1
    eval_masks = np.zeros((num_folds, num_rows), bool)
    start = 0
    for fold, size in enumerate(sizes):
        eval_masks[fold, start:start + size] = True
        start += size
    return ~eval_masks, eval_masks


def column_correlation(pred_MxV: jax.Array, true_MxV: jax.Array, mask_M: jax.Array, ddof: int = 0) -> jax.Array:
    """Mean of the product of z-scores per column over the masked rows; zero std -> 0.

    With ddof 0 this is Pearson r; the official fmri code z-scores with `torch.std`
    (ddof 1), which gives r * (M - 1) / M for M rows.
    """
    w = mask_M.astype(pred_MxV.dtype)[:, None]
    count = jnp.maximum(w.sum(), 1.0)

    def zscore(a: jax.Array) -> jax.Array:
        centred = (a - (a * w).sum(0) / count) * w
        std = jnp.sqrt((centred ** 2).sum(0) / jnp.maximum(count - ddof, 1.0))
        return jnp.where(std > 0, centred / jnp.where(std > 0, std, 1.0), 0.0)

    return (zscore(pred_MxV) * zscore(true_MxV)).sum(0) / count


def _score(pred_MxV: jax.Array, true_MxV: jax.Array, mask_M: jax.Array, metric: str) -> jax.Array:
    if metric == "corr":
        return column_correlation(pred_MxV, true_MxV, mask_M)
    w = mask_M.astype(pred_MxV.dtype)[:, None]
    return (((pred_MxV - true_MxV) ** 2) * w).sum(0) / jnp.maximum(w.sum(), 1.0)


def _decompose(x_NxP, train_N, fit_intercept: bool, form: str, rcond: float):
    """One fold: (x_mean_P, W_PxK, US_NxK, s2_K, keep_K) of the masked, centred training rows Xc.

    Every form gives predictions `(E - x_mean) W diag(1 / (s2 + a)) US^T (Y - y_mean)`.
    """
    w = train_N.astype(x_NxP.dtype)
    x_mean = (x_NxP * w[:, None]).sum(0) / jnp.maximum(w.sum(), 1.0) if fit_intercept else jnp.zeros(x_NxP.shape[1])
    xc = (x_NxP - x_mean) * w[:, None]
    if form == "svd":
        u, s, vt = jnp.linalg.svd(xc, full_matrices=False)
        keep = s > jnp.maximum(1e-10, rcond * s.max())
        return x_mean, vt.T, u * s, s * s, keep
    if form == "dual":
        s2, u = jnp.linalg.eigh(xc @ xc.T)
        w_pxk, us_nxk = xc.T @ u, u
    else:
        s2, v = jnp.linalg.eigh(xc.T @ xc)
        w_pxk, us_nxk = v, xc @ v
    keep = s2 > jnp.maximum(1e-20, rcond * s2.max())
    return x_mean, w_pxk, us_nxk, jnp.maximum(s2, 0.0), keep


def _gains(s2_K, keep_K, penalties):
    """1 / (s^2 + penalty) per component: [K] for a scalar penalty, [K, V] for a penalty per voxel."""
    if jnp.ndim(penalties):
        s2_K, keep_K = s2_K[:, None], keep_K[:, None]
    return jnp.where(keep_K, 1.0 / (s2_K + penalties), 0.0)


def _fold_path_scores(decomp, x_NxP, y_NxC, train_N, eval_idx_M, eval_mask_M, penalties_A,
                      fit_intercept: bool, metric: str):
    x_mean, w_pxk, u_nxk, s_k, keep_k = decomp
    w = train_N.astype(y_NxC.dtype)[:, None]
    y_mean = (y_NxC * w).sum(0) / jnp.maximum(w.sum(), 1.0) if fit_intercept else jnp.zeros(y_NxC.shape[1])
    b_kxc = u_nxk.T @ ((y_NxC - y_mean) * w)
    a_mxk = (x_NxP[eval_idx_M] - x_mean) @ w_pxk
    y_eval = y_NxC[eval_idx_M]

    def one_penalty(penalty):
        pred = (a_mxk * _gains(s_k, keep_k, penalty)) @ b_kxc + y_mean
        return _score(pred, y_eval, eval_mask_M, metric)

    return jax.lax.map(one_penalty, penalties_A)


def _fold_predict(decomp, x_NxP, y_NxC, train_N, eval_idx_M, penalties_C, fit_intercept: bool):
    x_mean, w_pxk, u_nxk, s_k, keep_k = decomp
    w = train_N.astype(y_NxC.dtype)[:, None]
    y_mean = (y_NxC * w).sum(0) / jnp.maximum(w.sum(), 1.0) if fit_intercept else jnp.zeros(y_NxC.shape[1])
    b_kxc = u_nxk.T @ ((y_NxC - y_mean) * w)
    a_mxk = (x_NxP[eval_idx_M] - x_mean) @ w_pxk
    return a_mxk @ (_gains(s_k, keep_k, penalties_C) * b_kxc) + y_mean


@functools.partial(jax.jit, static_argnames=("fit_intercept", "form", "rcond"))
def _decompose_folds(x_NxP, train_FxN, fit_intercept: bool, form: str, rcond: float):
    return jax.vmap(lambda t: _decompose(x_NxP, t, fit_intercept, form, rcond))(train_FxN)


@functools.partial(jax.jit, static_argnames=("fit_intercept", "metric"))
def _path_scores_chunk(decomps, x_NxP, y_NxC, train_FxN, eval_idx_FxM, eval_mask_FxM, penalties_A,
                       fit_intercept: bool, metric: str):
    fn = functools.partial(_fold_path_scores, fit_intercept=fit_intercept, metric=metric)
    return jax.vmap(fn, in_axes=(0, None, None, 0, 0, 0, None))(
        decomps, x_NxP, y_NxC, train_FxN, eval_idx_FxM, eval_mask_FxM, penalties_A)


@functools.partial(jax.jit, static_argnames=("fit_intercept",))
def _predict_chunk(decomps, x_NxP, y_NxC, train_FxN, eval_idx_FxM, penalties_C, fit_intercept: bool):
    fn = functools.partial(_fold_predict, fit_intercept=fit_intercept)
    return jax.vmap(fn, in_axes=(0, None, None, 0, 0, None))(decomps, x_NxP, y_NxC, train_FxN, eval_idx_FxM, penalties_C)


def _as_masks(masks, num_rows: int, name: str) -> np.ndarray:
    masks = np.asarray(masks, bool)
    if masks.ndim == 1:
        masks = masks[None]
    if masks.ndim != 2 or masks.shape[1] != num_rows:
        raise ValueError(f"{name} must be [folds, {num_rows}] booleans, got shape {masks.shape}")
    if not masks.any(axis=1).all():
        raise ValueError(f"{name}: every fold needs at least one row")
    return masks


class RidgeSolver:
    """Decomposes the training rows of every fold once; scores and predicts any responses from them."""

    def __init__(self, x_NxP, train_masks_FxN, *, fit_intercept: bool = True, form: str = "auto",
                 rcond: float = 1e-6, voxel_chunk: int = 2048):
        if form not in RIDGE_FORMS:
            raise ValueError(f"ridge form {form!r} is not one of {RIDGE_FORMS}")
        self.x_NxP = jnp.asarray(x_NxP, jnp.float32)
        if self.x_NxP.ndim != 2:
            raise ValueError(f"features must be [samples, features], got shape {self.x_NxP.shape}")
        if not np.isfinite(np.asarray(self.x_NxP)).all():
            raise ValueError("features contain NaN or infinite values")
        self.train_FxN = _as_masks(train_masks_FxN, self.x_NxP.shape[0], "train_masks")
        num_features, max_train = self.x_NxP.shape[1], int(self.train_FxN.sum(1).max())
        self.form = ("dual" if num_features > max_train else "primal") if form == "auto" else form
        self.fit_intercept = fit_intercept
        self.voxel_chunk = voxel_chunk
        self.decomps = _decompose_folds(self.x_NxP, jnp.asarray(self.train_FxN), fit_intercept, self.form, rcond)

    def _eval_rows(self, eval_masks_FxN) -> tuple[jax.Array, jax.Array]:
        masks = _as_masks(eval_masks_FxN, self.x_NxP.shape[0], "eval_masks")
        if len(masks) != len(self.train_FxN):
            raise ValueError(f"{len(masks)} eval masks for {len(self.train_FxN)} folds")
        size = int(masks.sum(1).max())
        idx = np.zeros((len(masks), size), np.int32)
        valid = np.zeros((len(masks), size), bool)
        for fold, mask in enumerate(masks):
            rows = np.flatnonzero(mask)
            idx[fold, :len(rows)], valid[fold, :len(rows)] = rows, True
        return jnp.asarray(idx), jnp.asarray(valid)

    def _chunks(self, y_NxV) -> tuple[list[jax.Array], int, int]:
        y = np.asarray(y_NxV, np.float32)
        if y.ndim != 2 or y.shape[0] != self.x_NxP.shape[0]:
            raise ValueError(f"responses must be [{self.x_NxP.shape[0]}, voxels], got shape {y.shape}")
        if not np.isfinite(y).all():
            raise ValueError("responses contain NaN or infinite values")
        num_voxels = y.shape[1]
        chunk = min(self.voxel_chunk, 1 << max(0, (num_voxels - 1).bit_length()))
        padded = -(-num_voxels // chunk) * chunk
        y = np.pad(y, ((0, 0), (0, padded - num_voxels)))
        return [jnp.asarray(y[:, i:i + chunk]) for i in range(0, padded, chunk)], chunk, num_voxels

    def path_scores(self, y_NxV, eval_masks_FxN, penalties_A: Sequence[float], metric: str = "mse") -> np.ndarray:
        """Per-voxel score of every fold and penalty, [F, A, V]: mean squared error or Pearson r."""
        if metric not in SCORE_METRICS:
            raise ValueError(f"ridge metric {metric!r} is not one of {SCORE_METRICS}")
        eval_idx, eval_valid = self._eval_rows(eval_masks_FxN)
        chunks, _, num_voxels = self._chunks(y_NxV)
        penalties = jnp.asarray(penalties_A, jnp.float32)
        train = jnp.asarray(self.train_FxN)
        outs = [_path_scores_chunk(self.decomps, self.x_NxP, c, train, eval_idx, eval_valid, penalties,
                                   self.fit_intercept, metric) for c in chunks]
        return np.concatenate(jax.device_get(outs), axis=2)[:, :, :num_voxels]

    def predict(self, y_NxV, eval_masks_FxN, penalties_V) -> np.ndarray:
        """Predictions for each fold's evaluation rows, [F, M, V] (M = that fold's rows, in row order).

        `penalties_V` is one penalty for all voxels or one per voxel.
        """
        eval_idx, eval_valid = self._eval_rows(eval_masks_FxN)
        chunks, chunk, num_voxels = self._chunks(y_NxV)
        penalties = np.broadcast_to(np.asarray(penalties_V, np.float32), (num_voxels,))
        penalties = np.pad(penalties, (0, chunk * len(chunks) - num_voxels), constant_values=1.0)
        train = jnp.asarray(self.train_FxN)
        outs = [_predict_chunk(self.decomps, self.x_NxP, c, train, eval_idx, jnp.asarray(penalties[i * chunk:(i + 1) * chunk]),
                               self.fit_intercept) for i, c in enumerate(chunks)]
        return np.concatenate(jax.device_get(outs), axis=2)[:, :, :num_voxels]


def best_penalty_index(scores_FxAxV: np.ndarray, metric: str, groups_V: np.ndarray | None = None,
                       per_voxel: bool = False) -> np.ndarray:
    """Index of the best penalty: per voxel, or shared within each group of voxels ([V] either way).

    Scores are averaged over folds (and over a group's voxels); ties go to the first penalty,
    as `GridSearchCV` and `argmax` do. Without groups, all voxels form one group.
    """
    mean_AxV = np.asarray(scores_FxAxV, np.float64).mean(0)
    sign = -1.0 if metric == "mse" else 1.0
    if per_voxel:
        return np.argmax(sign * mean_AxV, axis=0)
    groups = np.zeros(mean_AxV.shape[1], int) if groups_V is None else np.asarray(groups_V)
    best = np.empty(mean_AxV.shape[1], int)
    for group in np.unique(groups):
        members = groups == group
        best[members] = np.argmax(sign * mean_AxV[:, members].mean(1))
    return best
