"""experiments/word_tokens_study.py: every cell spends the same compute; the summary's means and per-paradigm
differences are those of the cells."""
import pytest
from fixtures.scripts import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("experiments/word_tokens_study.py")


def test_every_arm_spends_the_defaults_compute_and_no_more(study):
    budget, recipe_study = study.STUDY_TFLOP, load_script("experiments/recipe_study.py")
    assert budget == pytest.approx(recipe_study.planned_tflop(study.resolved_config(
        "configs/base.py", {**study.ARMS["char"], "train.num_steps": 4800})), rel=1e-6)  # the characters default's
    steps = {}
    for arm in study.ARMS:
        overrides, tflop = study.cell_overrides("configs/base.py", arm, 1, budget * (1 + 1e-9))
        assert overrides["train.seed"] == 1 and overrides["data.tokenizer.kind"] in ("char", "bpe", "words")
        assert budget * 0.999 < tflop <= budget * (1 + 1e-9), arm
        more = recipe_study.planned_tflop(study.resolved_config("configs/base.py", {**overrides,
                                                                           "train.num_steps": overrides["train.num_steps"] + 1}))
        assert more > budget, arm  # one more step would go over
        steps[arm] = overrides["train.num_steps"]
    assert steps["char"] == 4800 and steps["words12k"] < steps["words8k"] < steps["char"]  # bigger vocabulary, fewer steps


def _cell(arm, seed, zhoblimp, per_uid):
    return {"arm": arm, "seed": seed, "zhoblimp": zhoblimp, "hanzi_structure": 0.5, "hanzi_pinyin": 0.6,
            "tokens_seen": 300, "words_seen": 200, "steps": 10, "training_tflop": 1.0, "zhoblimp_per_uid": per_uid}


def test_summary_means_and_per_paradigm_differences(study):
    cells = [_cell("char", 0, 0.6, {"a": 0.5, "b": 0.7}), _cell("char", 1, 0.7, {"a": 0.7, "b": 0.7}),
             _cell("words8k", 0, 0.8, {"a": 0.9, "b": 0.6}), _cell("words8k", 1, 0.9, {"a": 0.9, "b": 0.5})]
    summary = study.summarize(cells)
    assert summary["reference_arm"] == "char"
    words = summary["arms"]["words8k"]
    assert words["zhoblimp"]["mean"] == pytest.approx(0.85) and words["zhoblimp"]["seeds"] == {0: 0.8, 1: 0.9}
    assert words["zhoblimp_per_uid_minus_reference"] == pytest.approx({"a": 0.3, "b": -0.15})
    assert list(words["zhoblimp_per_uid_minus_reference"]) == ["a", "b"]  # largest difference first
    assert words["tokens_per_word"] == pytest.approx(1.5)
    assert "zhoblimp_per_uid_minus_reference" not in summary["arms"]["char"]
