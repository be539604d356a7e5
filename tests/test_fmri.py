"""fMRI tasks: HRF/TR sampling vs numpy, scores by hand, planted signal, readers' errors, runners end to end."""
import dataclasses
import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.io
import scipy.stats

from babylm_jax.core.families import family_spec
from babylm_jax.corpus.tokenizer import CharTokenizer
from babylm_jax.eval.fmri import cogbench, encoding, features, ridge
from babylm_jax.tools import fmri_synth
from babylm_jax.config.evaluation import EvalSettings, default_settings
from babylm_jax.tasks.registry import TaskRunner, TaskSpec
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("synth")
    fmri_synth.generate(out, seed=3, snr=2.0, words_per_split=(70, 30), stories_per_split=(4, 2),
                        sentences_per_story=10, rois=("Language", "Vision"), roi_voxels=12)
    return out


def _split_rows(counts):
    return encoding._stack_masks(counts)


def test_tr_sampling_matrix_equals_direct_numpy_convolution():
    hrf = encoding.spm_hrf()
    t = np.arange(0, 32, 0.71 / 71)
    direct_hrf = scipy.stats.gamma.pdf(t, 6) - scipy.stats.gamma.pdf(t, 16) / 6
    np.testing.assert_allclose(hrf, direct_hrf / direct_hrf.sum(), rtol=1e-5, atol=1e-9)

    rng = np.random.default_rng(0)
    end = 1.0 + np.cumsum(rng.uniform(0.0, 0.6, 120))
    end[10] = end[9]  # two words in one frame: the first wins
    valid = rng.uniform(size=120) > 0.2
    settings = default_settings().fmri
    grid_length = int(end[valid][-1] * 100)
    reference_trs = -(-grid_length // 71) - 19 - 1
    timing = cogbench.StoryTiming(end, valid, reference_trs)
    words_WxD = rng.normal(size=(120, 5)).astype(np.float32)

    # The description, literally: place, convolve each column, cut, sample every 71st, shift.
    kept_features, kept_end = words_WxD[valid], end[valid]
    series = np.zeros((grid_length, 5))
    word, frame_of = 0, (kept_end * 100).astype(int)
    for frame in range(grid_length):
        if word < len(kept_end) and frame == frame_of[word]:
            series[frame] = kept_features[word]
            while word < len(kept_end) and frame_of[word] == frame:
                word += 1
    convolved = np.stack([np.convolve(hrf, series[:, d]) for d in range(5)], axis=1)[:grid_length]
    expected = convolved[::71][19:19 + reference_trs]

    ours = encoding.tr_sampling_matrix(timing, hrf, settings) @ words_WxD
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-6)
    design = encoding.story_design(words_WxD[None], timing, hrf, settings)[0]
    np.testing.assert_allclose(design, (expected - expected.mean()) / expected.std(), rtol=1e-3, atol=1e-4)

    with pytest.raises(ValueError, match="reference"):
        encoding.tr_sampling_matrix(dataclasses.replace(timing, reference_trs=reference_trs + 5), hrf, settings)


def test_word_scores_by_hand():
    true = np.array([[1.0, 2.0, 3.0, 0.0], [2.0, 1.0, 0.0, 0.0], [5.0, 5.0, 5.0, 0.0]])  # last voxel all zero
    pred = np.array([[1.0, 2.0, 4.0, 9.0], [1.0, 2.0, 3.0, 9.0], [1.0, 2.0, 3.0, 9.0]])
    r = encoding.word_pattern_correlations(pred, true)
    np.testing.assert_allclose(r, [np.corrcoef([1, 2, 4], [1, 2, 3])[0, 1], -1.0, 0.0])  # constant row -> 0
    correlations = np.array([0.1, 0.9, 0.3, 0.5, 0.2, 0.8, 0.4, 0.0, 0.6, 0.7, 0.05, 0.95, 0.15, 0.25, 0.35,
                             0.45, 0.55, 0.65, 0.75, 0.85])
    assert encoding.top_fraction_mean(correlations) == pytest.approx((0.95 + 0.9) / 2)  # k = int(0.1 * 20) = 2
    assert encoding.top_fraction_mean(correlations[:9]) == pytest.approx(0.9)  # k = max(1, 0) = 1


def _planted_story_designs(root, split, settings):
    hrf = encoding.spm_hrf()
    out = []
    for story_id in cogbench.story_ids(root, split):
        words = [w for line in cogbench.read_story(root, split, story_id) for w in line]
        timing = cogbench.read_story_timing(root, split, story_id, len(words))
        planted = fmri_synth.planted_word_features(words, 8, seed=3)
        out.append(encoding.story_design(planted[None], timing, hrf, settings)[0])
    return np.concatenate(out)


@pytest.mark.slow
def test_planted_signal_is_recovered_near_the_ceiling(synth):
    truth = json.loads((synth / "synth_truth.json").read_text())
    root = synth / "cogbench"
    words = {s: cogbench.read_words(root, s) for s in ("train", "dev")}
    x = np.concatenate([fmri_synth.planted_word_features(words[s], 8, seed=3) for s in ("train", "dev")])
    responses = {s: np.concatenate([cogbench.read_word_responses(root, split, s, len(words[split]))
                                    for split in ("train", "dev")]) for s in ("01", "02")}
    train, dev = _split_rows([70, 30])
    settings = default_settings().word_fmri
    planted = encoding.score_word_fmri(x, responses, train, dev, dev, settings)
    shuffled = encoding.score_word_fmri(np.random.default_rng(0).permutation(x), responses, train, dev, dev, settings)
    planted_mean = np.mean([v["score"] for v in planted.values()])
    assert 0.9 * truth["word_fmri"]["ceiling"] <= planted_mean <= truth["word_fmri"]["ceiling"] + 0.02
    # The top-10% statistic is biased up even for noise; the mean over all words is not.
    assert np.mean([v["mean_word_r"] for v in planted.values()]) > 0.5
    assert abs(np.mean([v["mean_word_r"] for v in shuffled.values()])) < 0.1

    settings = dataclasses.replace(default_settings().fmri, rois=("Language", "Vision"))
    x = np.concatenate([_planted_story_designs(root, s, settings) for s in ("train", "dev")])
    trs = {}
    for split in ("train", "dev"):
        for story_id in cogbench.story_ids(root, split):
            num_words = sum(len(line) for line in cogbench.read_story(root, split, story_id))
            trs[split, story_id] = cogbench.read_story_timing(root, split, story_id, num_words).reference_trs
    stories = {s: cogbench.story_ids(root, s) for s in ("train", "dev")}
    counts = [sum(trs[s, i] for i in stories[s]) for s in ("train", "dev")]
    train, dev = _split_rows(counts)
    groups = list(encoding._group_responses(root, ["train", "dev"], stories, trs, settings.rois, ["01", "02"]))
    rng = np.random.default_rng(1)
    scores = encoding.score_fmri({0: x, 1: rng.permutation(x)}, groups, train, dev, dev, settings)
    planted_mean = np.mean([g[0]["score"] for g in scores.values()])
    shuffled_mean = np.mean([g[1]["score"] for g in scores.values()])
    assert 0.9 * truth["fmri"]["ceiling"] <= planted_mean <= truth["fmri"]["ceiling"] + 0.02
    assert abs(shuffled_mean) < 0.15


@pytest.fixture(scope="module")
def loaded():
    tokenizer = CharTokenizer([chr(c) for c in range(0x4E00, 0x4E00 + 64)], byte_fallback=True)
    config = ModelConfig(family="mlm", vocab_size=tokenizer.vocab_size, d_model=32, num_layers=2, num_heads=2,
                         d_ff=64, max_len=32)
    model = Transformer(config)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))

    @dataclasses.dataclass
    class Loaded:
        model: Transformer
        params: dict
        tokenizer: CharTokenizer

    return Loaded(model, params, tokenizer)


@pytest.mark.slow
def test_pooled_features_equal_one_row_at_a_time(loaded):
    model, params, tok = loaded.model, loaded.params, loaded.tokenizer

    @jax.jit
    def hidden_states(ids_1x16, segments_1x16):
        return model.apply(params, ids_1x16, segments_1x16, return_hidden_states=True, method=Transformer.encode)[1]

    def one_row(ids):  # [layers, len(ids), D], the row alone (padding is its own segment)
        padded = np.zeros((1, 16), np.int32)
        padded[0, :len(ids)] = ids
        return np.asarray(hidden_states(padded, (padded > 0).astype(np.int32)))[:, 0, :len(ids)]

    words = ["一丁", "七", "万丈三上"]
    ours = features.word_features(model, params, tok, "mlm", words)
    for i, word in enumerate(words):
        expected = one_row(family_spec("mlm").framing.frame(tok.encode(word))).mean(1)
        np.testing.assert_allclose(ours[:, i], expected, rtol=1e-5, atol=1e-5)
    contexts = [["一丁", "七", "万丈"], ["三上"] * 20]  # the second exceeds max_len 32 and is chunked
    ours = features.story_word_features(model, params, tok, "mlm", contexts)
    assert ours.shape == (3, 23, 32)
    expected = one_row(family_spec("mlm").framing.frame(tok.encode("一丁七万丈")))[:, 4:6].mean(1)
    np.testing.assert_allclose(ours[:, 2], expected, rtol=1e-5, atol=1e-5)


def _spec(name):
    runner = TaskRunner.WORD_FMRI if name == "word_fmri" else TaskRunner.FMRI
    return TaskSpec(name, "fmri", "mean", runner, ("train/word/word.txt",), folder="cogbench")


def _settings(layer=-1, layers=None) -> EvalSettings:
    settings = default_settings()
    discourse = dataclasses.replace(settings.fmri, rois=("Language", "Vision"), layers=layers)
    return dataclasses.replace(settings, fmri_layer=layer, fmri=discourse)


@pytest.mark.slow
def test_runners_end_to_end_with_layer_sweep_and_averages(synth, loaded):
    word = encoding.run_word_fmri(_spec("word_fmri"), loaded, synth, _settings())
    assert word.details["layer"] == 2 and set(word.details["layer_sweep"]) == {"0", "1", "2"}
    per_subject = word.details["per_subject"]
    assert sorted(per_subject) == ["01", "02"]
    assert word.values["mean"] == pytest.approx((per_subject["01"] + per_subject["02"]) / 2)
    for s in ("01", "02"):  # the top-10% word mean is never below the all-word mean
        assert per_subject[s] >= word.details["mean_word_r"][s] - 1e-12
    assert word.values["mean"] == pytest.approx(word.details["layer_sweep"]["2"])
    discourse = encoding.run_fmri(_spec("fmri"), loaded, synth, _settings(layer=1, layers=(1,)))
    per_group = discourse.details["per_roi_subject"]
    assert sorted(per_group) == ["Language/01", "Language/02", "Vision/01", "Vision/02"]
    per_roi = discourse.details["per_roi"]
    assert per_roi["Language"] == pytest.approx((per_group["Language/01"] + per_group["Language/02"]) / 2)
    assert discourse.values["mean"] == pytest.approx((per_roi["Language"] + per_roi["Vision"]) / 2)
    assert discourse.details["per_roi"]["Vision"] == pytest.approx((per_group["Vision/01"] + per_group["Vision/02"]) / 2)
    assert np.isfinite(discourse.values["mean"]) and "layers" in discourse.figures
    assert set(discourse.details["layer_sweep"]) == {"1"}


def test_bad_input_gets_a_clear_message(synth, tmp_path):
    root = tmp_path / "cogbench"
    shutil.copytree(synth / "cogbench", root)
    (root / "dev" / "word_fmri" / "02_selected.mat").unlink()
    words = cogbench.read_words(root, "dev")
    with pytest.raises(FileNotFoundError, match="subject '02'"):
        cogbench.read_word_responses(root, "dev", "02", len(words))
    with pytest.raises(ValueError, match="lists 29 words"):
        cogbench.read_word_responses(root, "dev", "01", len(words) - 1)
    examples = scipy.io.loadmat(root / "dev" / "word_fmri" / "01_selected.mat")["examples"]
    examples[3, 5] = np.nan
    scipy.io.savemat(root / "dev" / "word_fmri" / "01_selected.mat", {"examples": examples})
    with pytest.raises(ValueError, match="01_selected.mat: 1 NaN"):
        cogbench.read_word_responses(root, "dev", "01", len(words))
    shutil.rmtree(root / "train" / "fmri" / "Vision" / "01")
    with pytest.raises(FileNotFoundError, match=r"ROI 'Vision': subject\(s\) \['01'\] missing"):
        cogbench.fmri_subjects(root, "train", ("Language", "Vision"))
    with pytest.raises(FileNotFoundError, match="ROI 'Memory' is missing"):
        cogbench.fmri_subjects(root, "train", ("Language", "Memory"))
    story = root / "train" / "story" / "story_1.txt"
    story.write_text(story.read_text(encoding="utf-8") + "多 余\n", encoding="utf-8")
    num_words = sum(len(line) for line in cogbench.read_story(root, "train", 1))
    with pytest.raises(ValueError, match="entries but story_1.txt in train has"):
        cogbench.read_story_timing(root, "train", 1, num_words)
    assert cogbench.read_story_timing(root, "train", 2, sum(map(len, cogbench.read_story(root, "train", 2)))
                                      ).reference_trs > 0  # node_count_bu is MATLAB v7.3 (HDF5)
    # the shapes and dtypes the official code relies on
    num_words = sum(map(len, cogbench.read_story(root, "train", 2)))
    notpu = root / "train" / "notPU" / "story_2.mat"
    isvalid = scipy.io.loadmat(notpu)["isvalid"]
    assert isvalid.shape == (num_words, 1)
    scipy.io.savemat(notpu, {"isvalid": isvalid.T})
    with pytest.raises(ValueError, match=rf"notPU/story_2.mat: 'isvalid' has shape \(1, {num_words}\)"):
        cogbench.read_story_timing(root, "train", 2, num_words)
    times = root / "train" / "word_time_features_postprocess" / "story_3_word_time.mat"
    scipy.io.savemat(times, {"end": scipy.io.loadmat(times)["end"].T})
    with pytest.raises(ValueError, match="story_3_word_time.mat: 'end' has shape"):
        cogbench.read_story_timing(root, "train", 3, sum(map(len, cogbench.read_story(root, "train", 3))))
    reference = root / "train" / "node_count_bu" / "story_4.mat"
    scipy.io.savemat(reference, {"word_feature": cogbench.load_mat_array(reference, "word_feature")})  # MATLAB v5
    with pytest.raises(ValueError, match="node_count_bu/story_4.mat: not a MATLAB v7.3"):
        cogbench.read_story_timing(root, "train", 4, sum(map(len, cogbench.read_story(root, "train", 4))))
    response_path = root / "train" / "fmri" / "Language" / "01" / "story_1.mat"
    response = scipy.io.loadmat(response_path)["fmri_response"]
    assert response.dtype == np.float32
    scipy.io.savemat(response_path, {"fmri_response": response.astype(np.float64)})
    with pytest.raises(ValueError, match="story_1.mat: 'fmri_response' is float64"):
        cogbench.read_story_response(root, "train", "Language", "01", 1, response.shape[1])


def _official_ridge_train_dev_test(train_x, train_y, dev_x, dev_y, test_x, test_y):
    """The official `ridge_multidim` + `ridge_train_dev_test` (cogbench/utils/data_utils.py), in numpy float64."""
    def zs(v):
        return (v - v.mean(0)) / v.std(0, ddof=1)  # torch.std: ddof 1

    alphas = np.logspace(-3, 3, 10)
    u, s, vt = np.linalg.svd(train_x, full_matrices=False)
    keep = s > 1e-10
    ur, pvh = u[:, keep].T @ train_y, dev_x @ vt[keep].T
    dev_corrs = []
    for a in alphas:
        pred = (pvh * (s[keep] / (s[keep] ** 2 + a ** 2))) @ ur
        with np.errstate(invalid="ignore", divide="ignore"):
            dev_corrs.append(np.nan_to_num((zs(dev_y) * zs(pred)).mean(0)))
    best = alphas[np.argmax(np.mean(dev_corrs, axis=1))]
    pred = test_x @ (vt.T @ np.diag(s / (s ** 2 + best ** 2)) @ (u.T @ train_y))
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.nan_to_num((zs(pred) * zs(test_y)).mean(0)).mean()), float(best)


def test_discourse_ridge_and_correlation_are_the_official_ones():
    settings = default_settings().fmri
    assert (settings.ridge_form, settings.rcond, settings.correlation_ddof) == ("svd", 0.0, 1)
    rng = np.random.default_rng(4)
    n_train, n_dev, n_test, dim = 150, 60, 50, 24
    x = rng.normal(size=(n_train + n_dev + n_test, dim)).astype(np.float32)
    x[:, -3:] = x[:, :3] + 1e-3 * x[:, -3:]  # ill-conditioned columns, where routes differ
    y = (x[:, :6] @ rng.normal(size=(6, 10)) + 3.0 * rng.normal(size=(len(x), 10))).astype(np.float32)
    y[:, 0] = 0.0  # a silent voxel scores 0
    train, dev, test = _split_rows([n_train, n_dev, n_test])
    ours = encoding.score_fmri({0: x}, [("Language/01", y)], train, dev, test, settings)["Language/01"][0]
    expected, alpha = _official_ridge_train_dev_test(x[train], y[train], x[dev], y[dev], x[test], y[test])
    assert ours["alpha"] == pytest.approx(alpha)
    assert ours["score"] == pytest.approx(expected, abs=1e-4)
    pearson = encoding.score_fmri({0: x}, [("g", y)], train, dev, test,
                                  dataclasses.replace(settings, correlation_ddof=0))
    assert pearson["g"][0]["score"] * (n_test - 1) / n_test == pytest.approx(ours["score"], rel=1e-5)


def test_column_correlation_ddof():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(40, 3)), rng.normal(size=(40, 3))
    mask = np.ones(40, bool)
    r = np.array([np.corrcoef(a[:, k], b[:, k])[0, 1] for k in range(3)])
    np.testing.assert_allclose(ridge.column_correlation(a, b, mask), r, rtol=1e-5)
    np.testing.assert_allclose(ridge.column_correlation(a, b, mask, ddof=1), r * 39 / 40, rtol=1e-5)


class _PrefixTokenizer(CharTokenizer):
    """Characters, plus one marker token at the start of every encoded text (as SentencePiece's dummy prefix)."""

    def encode(self, text):
        return [self.MARKER] + super().encode(text)


def test_story_words_are_tokenized_each_on_its_own(loaded):
    """The official `tokenizer(words, is_split_into_words=True)`: a word's tokens are its own encoding."""
    model, params = loaded.model, loaded.params
    tok = _PrefixTokenizer([chr(c) for c in range(0x4E00, 0x4E00 + 64)], byte_fallback=True)
    tok.MARKER = CharTokenizer.encode(tok, "乙")[0]  # an ordinary id the words below do not use
    words = ["一丁", "七", "万丈三"]
    ours = features.story_word_features(model, params, tok, "mlm", [words])
    row = family_spec("mlm").framing.frame([i for w in words for i in tok.encode(w)])  # [cls] 乙一丁 乙七 乙万丈三 [sep]
    assert len(row) == 11
    padded = np.zeros((1, 16), np.int32)
    padded[0, :len(row)] = row
    hidden = np.asarray(model.apply(params, padded, (padded > 0).astype(np.int32), return_hidden_states=True,
                                    method=Transformer.encode)[1])[:, 0]
    for k, positions in enumerate([[1, 2, 3], [4, 5], [6, 7, 8, 9]]):
        np.testing.assert_allclose(ours[:, k], hidden[:, positions].mean(1), rtol=1e-5, atol=1e-5)
    # chunks of whole words by their own token counts: room 5 holds 一丁 (3) and 七 (2), not 万丈三 (4) too
    rows = features.context_rows(tok, words, room=5)
    assert [len(ids) for ids, _ in rows] == [5, 4]
    assert rows[0][1] == [[0, 1, 2], [3, 4]] and rows[1][1] == [[0, 1, 2, 3]]
    # a word alone over the room is a chunk of its own (the row cuts it), as the official loop does
    assert [len(ids) for ids, _ in features.context_rows(tok, ["七", "一丁七万丈三上", "七"], room=5)] == [2, 8, 2]
