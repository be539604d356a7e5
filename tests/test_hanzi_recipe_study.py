"""experiments/hanzi_recipe_study.py: both arms spend base.py's compute, the heads' FLOPs counted; the
per-arm means and the table are those of the cells."""
import subprocess
import sys

import pytest
from fixtures.scripts import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("experiments/hanzi_recipe_study.py")


def test_both_arms_spend_the_defaults_compute_heads_included(study):
    steps = {}
    for arm in study.ARMS:
        overrides, tflop = study.cell_overrides("configs/base.py", arm, 1, study.STUDY_TFLOP)
        assert overrides["train.seed"] == 1 and study.STUDY_TFLOP * 0.999 < tflop <= study.STUDY_TFLOP, arm
        steps[arm] = overrides["train.num_steps"]
    assert steps["base"] == 4167  # base.py as it ships
    assert steps["hanzi"] < steps["base"] * 0.92  # the heads add 11% to a token's FLOPs
    assert study.ARMS["hanzi"]["data.hanzi_facts.share"] > 0 and study.ARMS["base"] == {}


def _cell(arm, seed, zhoblimp, pinyin=None):
    scores = {"zhoblimp": zhoblimp, **({"hanzi_pinyin": pinyin} if pinyin is not None else {})}
    return {"arm": arm, "seed": seed, "steps": 10, "training_tflop": 1.0, "fact_words": 0, "scores": scores,
            "row_mean": sum(scores.values()) / len(scores), "tasks": len(scores), "final_eval_loss": 4.0,
            "hanzi_probe_items_leaked": 0, "train_minutes": 1.0, "load_before": 1.0, "load_after": 2.0}


def test_arm_means_and_table(study):
    cells = [_cell("base", 0, 0.6, 0.5), _cell("base", 1, 0.7, 0.6), _cell("hanzi", 0, 0.8, 0.7), _cell("hanzi", 1, 0.9)]
    summary = study.summarize(cells)
    assert summary["base"]["tasks"]["zhoblimp"] == {"mean": pytest.approx(0.65), "seeds": [0.6, 0.7]}
    assert summary["base"]["row_mean"] == pytest.approx(0.6)
    assert list(summary["hanzi"]["tasks"]) == ["zhoblimp"]  # a task only some seeds have is left out of the means
    table = study.tables(cells, summary)
    assert "| hanzi | 1 | 10 | 1.0 | 0 | 0.9000 | - |" in table and "| base | 2 | 0.6500 | 0.5500 | 0.6000 (0.5500 / 0.6500) |" in table


def test_a_train_runs_in_pieces_stopped_and_resumed(study, tmp_path):
    """A piece still running at its time limit is stopped with SIGTERM and the command run again until it ends."""
    marker = tmp_path / "stopped_once"
    program = (  # trains for ever the first time; stops as train does on SIGTERM (143); ends the second time
        "import pathlib, signal, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if marker.exists(): sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, lambda *_: (marker.touch(), sys.exit(143)))\n"
        "time.sleep(60)\n")
    assert study.train_in_pieces([sys.executable, "-c", program], minutes=5 / 60) == 2
    with pytest.raises(subprocess.CalledProcessError):  # any other exit stops the cell
        study.train_in_pieces([sys.executable, "-c", "import sys; sys.exit(3)"], minutes=1)


def test_a_cell_that_held_no_text_out_is_written_with_none(study):
    cell = {**_cell("base", 0, 0.6), "final_eval_loss": None}  # summary.json's null
    assert "| 0.6000 (1) | none |" in study.tables([cell], study.summarize([cell]))
