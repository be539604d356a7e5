"""JAX ridge vs sklearn GridSearchCV(Ridge): 5 contiguous folds, 10 alphas, one alpha for all voxels.

    python experiments/benchmarks/ridge_speed.py [--samples 3000 --features 768 --voxels 10000]

Both select alpha by mean cross-validated MSE (as the official word_fmri code), refit on all
training rows and predict a held-out test set, in the same process on the same float32 data.
sklearn runs with n_jobs=1 (its BLAS threads still apply). Each side is timed `--repeats`
times, interleaved, with the matmul peak probed before each pair (`conditions.py`); the best
times count. The run's conditions (peak against the best known idle peak, load before and
after) come before the last line, the speed ratio.
"""
import argparse
import time

import numpy as np
from conditions import Conditions
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold

from babylm_jax.eval.fmri import ridge


def jax_ridge(x, y, x_test, alphas, folds):
    train_masks, eval_masks = ridge.contiguous_folds(len(x), folds)
    scores = ridge.RidgeSolver(x, train_masks).path_scores(y, eval_masks, alphas, "mse")
    best = alphas[ridge.best_penalty_index(scores, "mse")[0]]
    stacked = np.concatenate([x, x_test])
    train = np.arange(len(stacked)) < len(x)
    y_stacked = np.concatenate([y, np.zeros((len(x_test), y.shape[1]), y.dtype)])
    return best, ridge.RidgeSolver(stacked, train).predict(y_stacked, ~train, best)[0]


def sklearn_ridge(x, y, x_test, alphas, folds):
    grid = GridSearchCV(Ridge(), {"alpha": alphas}, scoring="neg_mean_squared_error", cv=KFold(folds), n_jobs=1)
    grid.fit(x, y)
    return grid.best_params_["alpha"], grid.predict(x_test)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--features", type=int, default=768)
    parser.add_argument("--voxels", type=int, default=10000)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    conditions = Conditions.start()
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(args.samples + args.test, args.features)).astype(np.float32)
    weights = rng.normal(size=(args.features, args.voxels)).astype(np.float32) / np.sqrt(args.features)
    y_all = x_all @ weights + 3.0 * rng.normal(size=(len(x_all), args.voxels)).astype(np.float32)
    x, x_test, y = x_all[:args.samples], x_all[args.samples:], y_all[:args.samples]
    alphas = np.logspace(-4, 4, 10) * args.samples  # the interesting range for this data scale
    print(f"{args.samples} samples x {args.features} features x {args.voxels} voxels, 5 folds, 10 alphas")

    jax_ridge(x, y[:, :2048], x_test, alphas, 5)
    jax_seconds = sk_seconds = float("inf")
    for _ in range(args.repeats):
        conditions.probe()
        start = time.perf_counter()
        jax_alpha, jax_pred = jax_ridge(x, y, x_test, alphas, 5)
        jax_seconds = min(jax_seconds, time.perf_counter() - start)
        start = time.perf_counter()
        sk_alpha, sk_pred = sklearn_ridge(x, y, x_test, alphas, 5)
        sk_seconds = min(sk_seconds, time.perf_counter() - start)
    print(f"jax: {jax_seconds:.2f} s, alpha {jax_alpha:.4g}")
    print(f"sklearn: {sk_seconds:.2f} s, alpha {sk_alpha:.4g}")

    relative = np.abs(jax_pred - sk_pred).max() / np.abs(sk_pred).max()
    print(f"same alpha: {jax_alpha == sk_alpha}; max prediction difference / max |prediction|: {relative:.2e}")
    if jax_alpha != sk_alpha or relative > 1e-3:
        raise SystemExit("JAX and sklearn disagree")
    conditions.report()
    print(f"jax_over_sklearn: {sk_seconds / jax_seconds:.2f}")


if __name__ == "__main__":
    main()
