"""experiments/recipe_study.py: every row fits the compute budget and means the same whatever base.py's defaults."""
import pytest
from fixtures.scripts import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("experiments/recipe_study.py")


def test_every_row_names_its_tokenizer_and_fits_the_budget(study):
    for name, (config_file, overrides) in study.ROWS.items():
        assert overrides.get("data.tokenizer.kind") in ("char", "bpe", "unigram") and "model.vocab_size" in overrides, name
        assert name.split("_")[0] in ("char", "bpe6k", "bpe3k", "unigram6k", "mlm", "hybrid"), name
        config = study.resolved_config(config_file, overrides)
        assert 0 < study.planned_tflop(config) <= 100, name
        for key, value in overrides.items():
            node = config
            for part in key.split("."):
                node = node[part]
            assert node == value, (name, key)


def test_planned_tflop_counts_steps_linearly(study):
    one = study.planned_tflop(study.resolved_config(study.BASE, {"train.num_steps": 1200}))
    four = study.planned_tflop(study.resolved_config(study.BASE, {"train.num_steps": 4800}))
    assert four == pytest.approx(4 * one) and 20 < one < 30  # 10.1 MFLOP/token x 2.46M tokens


def test_commands_are_a_train_then_a_full_zhoblimp_evaluate(study, tmp_path):
    train, evaluate = study.commands("r", study.BASE, {"train.seed": 1}, tmp_path, "data")
    assert train[1:3] == ["-m", "babylm_jax.train"] and "--config.train.seed=1" in train
    assert evaluate[1:3] == ["-m", "babylm_jax.evaluate"] and evaluate[evaluate.index("--tasks") + 1] == "zhoblimp"
