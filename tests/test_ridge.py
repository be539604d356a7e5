"""The JAX ridge against sklearn `Ridge` and against explicit loops over penalties."""
import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold

from babylm_jax.eval.fmri import ridge

PENALTIES = np.logspace(-2, 3, 6)


def _data(rows, features, voxels, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (x @ rng.normal(size=(features, voxels)) * 0.3 + rng.normal(size=(rows, voxels)) + 2.0).astype(np.float32)
    return x, y


def _sklearn_predict(x_train, y_train, x_eval, penalty, fit_intercept):
    model = Ridge(alpha=penalty, fit_intercept=fit_intercept)
    return model.fit(x_train.astype(np.float64), y_train.astype(np.float64)).predict(x_eval.astype(np.float64))


@pytest.mark.parametrize("features,fit_intercept,form", [(12, True, "auto"), (12, False, "auto"),
                                                          (70, True, "auto"), (12, True, "svd")])
def test_predictions_equal_sklearn_for_each_penalty(features, fit_intercept, form):
    x, y = _data(55, features, 37)
    train = np.arange(55) < 40
    solver = ridge.RidgeSolver(x, train, fit_intercept=fit_intercept, form=form, voxel_chunk=16)  # 3 voxel chunks
    assert solver.form == {"svd": "svd", "auto": "dual" if features > 40 else "primal"}[form]  # 70 > 40 rows: dual
    for penalty in PENALTIES:
        ours = solver.predict(y, ~train, penalty)[0]
        reference = _sklearn_predict(x[train], y[train], x[~train], penalty, fit_intercept)
        assert np.abs(ours - reference).max() <= 1e-4 * np.abs(reference).max()


def test_per_voxel_penalties_predict_each_voxel_with_its_own():
    x, y = _data(50, 10, 6)
    train = np.arange(50) < 35
    per_voxel = PENALTIES[[0, 5, 2, 2, 4, 1]]
    ours = ridge.RidgeSolver(x, train).predict(y, ~train, per_voxel)[0]
    for v, penalty in enumerate(per_voxel):
        reference = _sklearn_predict(x[train], y[train, v:v + 1], x[~train], penalty, True).reshape(-1)
        np.testing.assert_allclose(ours[:, v], reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


def _loop_scores(x, y, train_masks, eval_masks, metric):
    """[F, A, V] by refitting sklearn once per fold and penalty."""
    out = np.zeros((len(train_masks), len(PENALTIES), y.shape[1]))
    for f, (tr, ev) in enumerate(zip(train_masks, eval_masks)):
        for a, penalty in enumerate(PENALTIES):
            pred = _sklearn_predict(x[tr], y[tr], x[ev], penalty, True)
            if metric == "mse":
                out[f, a] = ((pred - y[ev]) ** 2).mean(0)
            else:
                out[f, a] = [np.corrcoef(pred[:, v], y[ev, v])[0, 1] for v in range(y.shape[1])]
    return out


@pytest.mark.parametrize("metric", ["mse", "corr"])
def test_path_scores_and_selection_equal_an_explicit_loop(metric):
    x, y = _data(53, 8, 9, seed=1)  # 53 rows: folds of 11, 11, 11, 10, 10 (padded eval rows)
    train_masks, eval_masks = ridge.contiguous_folds(53, 5)
    ours = ridge.RidgeSolver(x, train_masks).path_scores(y, eval_masks, PENALTIES, metric)
    reference = _loop_scores(x, y, train_masks, eval_masks, metric)
    np.testing.assert_allclose(ours, reference, rtol=2e-4, atol=2e-5)
    sign = -1 if metric == "mse" else 1
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    expected_group = {g: np.argmax(sign * reference.mean(0)[:, groups == g].mean(1)) for g in range(3)}
    np.testing.assert_array_equal(ridge.best_penalty_index(ours, metric, groups),
                                  [expected_group[g] for g in groups])
    np.testing.assert_array_equal(ridge.best_penalty_index(ours, metric, per_voxel=True),
                                  np.argmax(sign * reference.mean(0), axis=0))


def test_global_penalty_matches_grid_search_cv():
    x, y = _data(60, 10, 5, seed=2)
    train_masks, eval_masks = ridge.contiguous_folds(60, 5)
    for a, b in zip(train_masks, KFold(5).split(x)):
        np.testing.assert_array_equal(np.flatnonzero(a), b[0])
    grid = GridSearchCV(Ridge(), {"alpha": PENALTIES}, scoring="neg_mean_squared_error", cv=KFold(5))
    grid.fit(x.astype(np.float64), y.astype(np.float64))
    scores = ridge.RidgeSolver(x, train_masks).path_scores(y, eval_masks, PENALTIES, "mse")
    assert PENALTIES[ridge.best_penalty_index(scores, "mse")[0]] == grid.best_params_["alpha"]


def test_bad_input_is_named():
    x, y = _data(20, 4, 3)
    train = np.arange(20) < 15
    with pytest.raises(ValueError, match="NaN"):
        ridge.RidgeSolver(np.where(np.eye(20, 4) > 0, np.nan, x), train)
    solver = ridge.RidgeSolver(x, train)
    with pytest.raises(ValueError, match="responses must be"):
        solver.path_scores(y[:10], ~train, PENALTIES)
    with pytest.raises(ValueError, match="metric"):
        solver.path_scores(y, ~train, PENALTIES, metric="r2")
