"""Auxiliary character heads: labels per vocabulary, the positions that predict, the losses, the errors."""
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config  # noqa: E402

from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax import train  # noqa: E402
from babylm_jax.corpus import hanzi_labels, hanzi_lexicon  # noqa: E402
from babylm_jax.config.training import AUX_HEADS, AuxHeadsSettings  # noqa: E402
from babylm_jax.corpus.hanzi_labels import IGNORE  # noqa: E402
from babylm_jax.model import aux_heads, objectives  # noqa: E402
from babylm_jax.training import checkpoints, loop, metrics  # noqa: E402
from fixtures.cli import user_error  # noqa: E402

PIECES = ["[pad]", "伴", "▁办", "ab", "中国", "<0xE4>", "。", "⺮", "时"]


def _class(family, table, row):
    return hanzi_labels.inventories()[family][table[row, AUX_HEADS.index(family)]]


def test_labels_of_a_fixture_vocabulary():
    table = hanzi_labels.label_table(PIECES, rows=12)
    assert table.shape == (12, len(AUX_HEADS)) and table.dtype == np.int32
    assert [_class(f, table, 1) for f in AUX_HEADS] == ["bàn", 4, "b", "an", "亻"]
    assert [_class(f, table, 2) for f in AUX_HEADS][:4] == ["bàn", 4, "b", "an"]  # ▁ before a hanzi
    assert [_class(f, table, 8) for f in AUX_HEADS][:4] == ["shí", 2, "sh", "i"]
    # specials, Latin, a two-hanzi BPE piece, bytes, punctuation, a radical outside the basic
    # block and the padding rows up to the model's vocabulary: no label in any column
    assert (table[[0, 3, 4, 5, 6, 7, 9, 10, 11]] == IGNORE).all()
    sizes = hanzi_labels.head_sizes()
    assert sizes["tone"] == 5 and sizes["initial"] == 22 and sizes["syllable"] > 1000 and sizes["radical"] > 200


def _objective(weights, position="target"):
    config = aux_heads.AuxHeadsConfig(tuple(weights.items()), position)
    table = hanzi_labels.label_table(PIECES, rows=12)
    return aux_heads.AuxObjective(config, hanzi_labels.head_sizes(), table)


@pytest.mark.slow
def test_loss_and_mask_match_a_loop_over_positions():
    objective = _objective({"tone": 0.5, "radical": 2.0})
    hidden = jax.random.normal(jax.random.key(0), (2, 5, 8))
    params = {aux_heads.AUX_COLLECTION: objective.init(jax.random.key(1), 8)}
    ids = jnp.asarray([[1, 2, 3, 8, 0], [8, 8, 4, 1, 7]])
    weights = jnp.asarray([[1, 1, 1, 1, 1], [1, 0, 1, 1, 1]])
    total, sums = objective.loss(params, hidden, ids, weights)
    logits = objective.module.apply({"params": params[aux_heads.AUX_COLLECTION]}, hidden.reshape(10, 8))
    expected_total = 0.0
    for name, weight in objective.config.weights:
        column, ce, correct, count = AUX_HEADS.index(name), 0.0, 0, 0
        for n, token in enumerate(np.asarray(ids).reshape(-1)):
            label = objective.labels_VxF[token, column]
            if label == IGNORE or not np.asarray(weights).reshape(-1)[n]:
                continue
            row = np.asarray(logits[name][n], np.float64)
            ce += math.log(np.exp(row - row.max()).sum()) + row.max() - row[label]
            correct, count = correct + int(row.argmax() == label), count + 1
        assert count == 5  # 伴 办 时 时 伴 (the unweighted 时 and ab, 中国, ⺮ left out)
        np.testing.assert_allclose(np.asarray(sums[name]), [ce, correct, count], rtol=1e-5)
        expected_total += weight * ce
    np.testing.assert_allclose(float(total), expected_total, rtol=1e-5)
    metrics = aux_heads.step_metrics(sums)
    assert set(metrics) == {"aux_tone_loss", "aux_tone_acc", "aux_radical_loss", "aux_radical_acc"}


def test_bfloat16_heads_follow_float32_and_their_backward_scatters_nothing():
    """train.loss_logits_dtype="bfloat16" runs the heads' matmuls and logits in bf16 (float32 reductions): the
    losses and gradients stay near float32's; neither form's gradient scatters into the [N, classes] logits."""
    hidden = jax.random.normal(jax.random.key(0), (2, 5, 8))
    ids = jnp.asarray([[1, 2, 3, 8, 0], [8, 8, 4, 1, 7]])
    weights = jnp.ones((2, 5), jnp.int32)
    results = {}
    for dtype in ("float32", "bfloat16"):
        config = aux_heads.AuxHeadsConfig((("syllable", 1.0), ("tone", 0.5)), "input", dtype)
        objective = aux_heads.AuxObjective(config, hanzi_labels.head_sizes(), hanzi_labels.label_table(PIECES, rows=12))
        params = {aux_heads.AUX_COLLECTION: objective.init(jax.random.key(1), 8)}
        loss = jax.value_and_grad(lambda p, h: objective.loss(p, h, ids, weights)[0], argnums=(0, 1))
        assert "scatter" not in jax.jit(loss).lower(params, hidden).as_text(), dtype
        results[dtype] = loss(params, hidden)
    (loss32, grads32), (loss16, grads16) = results["float32"], results["bfloat16"]
    np.testing.assert_allclose(float(loss16), float(loss32), rtol=2e-2)
    for g16, g32 in zip(jax.tree.leaves(grads16), jax.tree.leaves(grads32)):
        np.testing.assert_allclose(np.asarray(g16, np.float32), np.asarray(g32), atol=2e-2 * float(np.abs(g32).max()))


def test_the_heads_flops_count_each_weighted_heads_classes():
    settings = AuxHeadsSettings(syllable=0.3, tone=0.1)
    classes = len(hanzi_labels.inventories()["syllable"]) + len(hanzi_labels.inventories()["tone"])
    assert metrics.aux_heads_flops_per_token(128, settings) == 6 * 128 * classes  # a matmul, forward and backward
    assert metrics.aux_heads_flops_per_token(128, AuxHeadsSettings()) == 0


def test_auto_position_is_the_input_for_causal_and_the_masked_position_otherwise(tiny_corpus_dir):
    config = tiny_config(tiny_corpus_dir)
    config.train.aux_heads.tone = 0.2
    assert config.train.aux_heads.position == "auto"
    train = RunConfig.from_config(config).train
    resolved = {f: aux_heads.AuxHeadsConfig.from_config(train, f).position for f in ("causal", "mlm", "hybrid")}
    assert resolved == {"causal": "input", "mlm": "target", "hybrid": "target"}
    config.train.aux_heads.position = "target"
    assert aux_heads.AuxHeadsConfig.from_config(RunConfig.from_config(config).train, "causal").position == "target"


def test_positions_follow_the_language_model_or_the_input():
    tokens, segments = jnp.asarray([[1, 2, 8, 0]]), jnp.asarray([[1, 1, 1, 0]])
    targets, weights = objectives.next_token_targets(tokens, segments)
    ids, w = _objective({"tone": 1.0}).positions(tokens, segments, targets, weights)
    assert ids.tolist() == [[2, 8, 0, 0]] and w.astype(int).tolist() == [[1, 1, 0, 0]]
    ids, w = _objective({"tone": 1.0}, "input").positions(tokens, segments, targets, weights)
    assert ids.tolist() == tokens.tolist() and w.astype(int).tolist() == [[1, 1, 1, 0]]


@pytest.mark.slow
def test_zero_weights_are_no_head_and_heads_add_to_the_summed_loss(tiny_corpus_dir):
    config = tiny_config(tiny_corpus_dir)
    assert aux_heads.AuxHeadsConfig.from_config(RunConfig.from_config(config).train) is None  # base.py: every weight 0
    from babylm_jax.training.optimizer import make_train_optimizer
    from babylm_jax.training.state import boxed_init_fn, build_model
    plain_run = RunConfig.from_config(config)
    model, optimizer = build_model(plain_run.model), make_train_optimizer(plain_run.train)
    plain = boxed_init_fn(plain_run, model, optimizer)(jax.random.key(0)).params
    config.train.aux_heads.tone = 0.3
    run = RunConfig.from_config(config)
    with_heads = boxed_init_fn(run, model, optimizer)(jax.random.key(0)).params
    assert set(plain) == {"params"} and set(with_heads) == {"params", aux_heads.AUX_COLLECTION}
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), plain["params"], with_heads["params"]))
    objective = aux_heads.AuxObjective(aux_heads.AuxHeadsConfig.from_config(run.train), hanzi_labels.head_sizes(),
                                       hanzi_labels.label_table(PIECES, rows=64))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 9, (2, 16)), jnp.int32)
    batch = {"tokens": tokens, "segment_ids": jnp.ones_like(tokens), "positions": jnp.broadcast_to(jnp.arange(16), (2, 16))}
    params = jax.tree.map(lambda x: getattr(x, "value", x), with_heads, is_leaf=lambda x: hasattr(x, "value"))
    summed = objectives.LossSettings(summed=True)
    base, base_metrics = objectives.compute_loss(model, params, batch, jax.random.key(1), settings=summed)
    total, metrics = objectives.compute_loss(model, params, batch, jax.random.key(1), settings=summed,
                                             aux_objective=objective)
    assert float(metrics["loss"]) == float(base_metrics["loss"])  # metrics["loss"] stays the LM loss
    np.testing.assert_allclose(float(total - base), 0.3 * float(metrics["aux"]["tone"][0]), rtol=1e-5)


@pytest.mark.slow
def test_a_run_with_heads_logs_them_and_exports_without_them(tiny_corpus_dir, tmp_path):
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=4, grad_accum_steps=2, eval_every_steps=4)
    config.checkpoint.every_steps = 4
    config.train.aux_heads.update(syllable=0.3, tone=0.1)
    loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "run"))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    assert logged and all(0 <= r["aux_syllable_acc"] <= 1 and r["aux_tone_loss"] > 0 for r in logged)
    loaded = checkpoints.load_for_eval(str(tmp_path / "run"))
    assert set(loaded.params) == {"params"}  # evaluation and export never see the heads


@pytest.mark.parametrize("override,expected", [
    ("--config.train.aux_heads.pinyin=0.3", "train.aux_heads.pinyin"),
    ("--config.train.aux_heads.tone=-0.1", "config key train.aux_heads.tone=-0.1: a loss weight must be a number >= 0"),
    ("--config.train.aux_heads.position=next", "train.aux_heads.position='next': must be one of ('auto', 'target', 'input')"),
])
def test_bad_head_settings_are_refused_before_any_data_work(capsys, tmp_path, override, expected):
    line = user_error(capsys, train, ["train", "--config=configs/base.py", f"--workdir={tmp_path / 'run'}", override])
    assert expected in line
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_missing_package_and_vocabulary_without_hanzi_are_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "docs.txt").write_text("\n\n".join(["the cat sat on the mat."] * 200) + "\n")
    config_file = tmp_path / "latin.py"
    config_file.write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom fixtures.data.synthetic import tiny_config\n"
        "def get_config():\n    config = tiny_config(%r)\n    config.train.aux_heads.radical = 0.3\n    return config\n"
        % (str(pathlib.Path(__file__).parent), str(tmp_path / "latin")))
    argv = ["train", f"--config={config_file}", f"--workdir={tmp_path / 'run'}"]
    line = user_error(capsys, train, argv)
    assert "config key train.aux_heads.radical: the tokenizer has no token that is a hanzi" in line
    assert not list((tmp_path / "run" / "data").glob("**/tokens*"))  # refused before tokenising

    def missing():
        raise hanzi_lexicon.MissingPackageError("hanzi facts and heads need the package 'pypinyin', which babylm_jax "
                                                "installs: pip install -e .")

    hanzi_labels.inventories.cache_clear()
    monkeypatch.setattr(hanzi_lexicon, "Lexicon", missing)
    line = user_error(capsys, train, argv[:2] + [f"--workdir={tmp_path / 'run2'}"])
    hanzi_labels.inventories.cache_clear()
    assert "the package 'pypinyin', which babylm_jax installs" in line and not (tmp_path / "run2").exists()
