"""experiments/benchmarks/h200_speed_report.py and scatter_check.py's comparisons: the figures the
device script reports, from hand-made inputs."""
import json

import numpy as np
import pytest
from fixtures.scripts import load_script


@pytest.fixture(scope="module")
def report():
    return load_script("experiments/benchmarks/h200_speed_report.py")


@pytest.fixture(scope="module")
def scatter():
    return load_script("experiments/benchmarks/scatter_check.py")


def _row(config, lever, tokens, tag="default", status="ran", mfu=0.1):
    return {"tag": tag, "config": f"configs/{config}.py", "lever": lever, "status": status, "keys": {},
            "tokens_per_s": tokens, "step_ms": 1e3 / tokens, "mfu": mfu, "compile_s": 1.0,
            "memory": {"peak": 2 ** 30}}


def test_recount_lines_find_the_counting_progress_even_between_carriage_returns(report):
    log = "step 1\rcount words:   0%|  | 0/5\rcount words:  20%|██ | 1/5\nstep 2\n"
    assert report.recount_lines(log) == ["count words:   0%|  | 0/5", "count words:  20%|██ | 1/5"]
    assert report.recount_lines("step 1\nstep 2\n") == []


def test_finetune_rates_come_from_the_task_s_own_lines(report):
    log = ("[finetune] afqmc: compiled the train step for 2 row count(s) [8, 16] and the dev step in 12.5 s\n"
           "[finetune] ocnli: 9.00 steps/s over steps 2-21: training about 3 s more\n"
           "[finetune] afqmc: 4.00 steps/s over steps 2-21: training about 30 s more\n"
           "[finetune] afqmc: dev evaluation 2.0 s: about 2 s more over the 1 epochs left\n")
    rates = report.finetune_rates_from_log(log, "afqmc", num_dev=1000, batch_size=32)
    assert rates == {"steps_per_s": 4.0, "dev_eval_s": 2.0, "compile_s": 12.5,
                     "train_examples_per_s": 128.0, "eval_examples_per_s": 500.0}
    assert report.finetune_rates_from_log("", "afqmc", 1000, 32) == {}


def test_full_protocol_seconds_sum_every_task_s_epochs(report):
    # 1 example/s each way, no overhead: sum of epochs x (train + dev), plus the final passes
    by_hand = sum(e * (t + d) for t, d, e in report.OFFICIAL_PROTOCOL.values())
    assert report.full_protocol_seconds(1.0, 1.0, 0.0, 0) == by_hand
    extra = sum(2 * d for _, d, _ in report.OFFICIAL_PROTOCOL.values()) + 4 * 5.0
    assert report.full_protocol_seconds(1.0, 1.0, 5.0, 2) == by_hand + extra


def test_lever_table_divides_by_its_own_config_s_baseline(report):
    rows = [_row("hybrid_100m", "baseline", 100.0), _row("causal_14m", "baseline", 1000.0),
            _row("hybrid_100m", "rng_rbg", 150.0), _row("causal_14m", "rng_rbg", 1.0, status="skipped: no random bits"),
            _row("causal_14m", "baseline", 10.0, tag="deterministic")]
    table = report.lever_table(rows)
    assert "| hybrid_100m | baseline |" in table[2] and "| causal_14m | baseline |" in table[4]  # by config, baseline first
    rbg = next(line for line in table if "| hybrid_100m | rng_rbg |" in line)
    assert "| 150 |" in rbg and "| 1.500 |" in rbg and "| 1.00 |" in rbg  # tokens/s, x baseline, GiB
    assert any("skipped: no random bits" in line for line in table)
    assert len(table) == 2 + 4  # the deterministic row is another tag's


def test_deterministic_slowdowns_are_against_the_default_scatter(report):
    rows = [_row("causal_14m", "baseline", 1000.0, tag="ops_default"),
            _row("causal_14m", "one_hot_embedding_grad", 800.0, tag="ops_default"),
            _row("causal_14m", "baseline", 500.0, tag="ops_deterministic"),
            _row("causal_14m", "one_hot_embedding_grad", 900.0, tag="ops_deterministic"),
            _row("causal_14m", "baseline", 1.0)]  # part a's: not part of this table
    lines, figures = report.deterministic_table(rows)
    assert figures["deterministic_scatter_slowdown"] == 2.0
    assert figures["deterministic_one_hot_slowdown"] == pytest.approx(1.111, abs=1e-3)
    assert figures["default_one_hot_slowdown"] == 1.25 and len(lines) == 2 + 4


def test_torch_table_puts_our_baseline_beside_pytorch(report):
    torch_rows = [{"name": "causal_14m", "class": "GPT2LMHeadModel", "compiled": True, "batch": [128, 512],
                   "tokens_per_s": 500.0, "mfu": 0.05}]
    lines, figures = report.torch_table(torch_rows, [_row("causal_14m", "baseline", 1000.0)])
    assert figures == {"causal_14m_ours_over_torch": 2.0, "causal_14m_torch_tokens_per_s": 500.0}
    assert "| 2.00 |" in lines[-1]


def test_moved_figures_read_the_log_and_metrics(report, tmp_path):
    (tmp_path / "checkpoints" / "20").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 5, "tokens_per_s": 1.0, "mfu": 0.0, "loss": 9.0}, {"step": 10, "tokens_per_s": 10.0, "mfu": 0.1, "loss": 8.0},
        {"step": 15, "tokens_per_s": 30.0, "mfu": 0.3, "loss": 7.0}, {"step": 15, "eval_loss": 7.5})))
    figures = report.moved_figures(tmp_path, "train...\n")
    assert figures["recounted"] is False and figures["checkpoints"] == ["20"]
    assert figures["median_tokens_per_s"] == 20.0 and figures["final_loss"] == 7.0


def test_scatter_set_check_takes_any_written_value_and_catches_a_wrong_slot(scatter):
    initial = np.zeros(4)
    idx, values = np.array([0, 0, 2]), np.array([5.0, 6.0, 7.0])
    assert scatter.compare_set(np.array([6.0, 0.0, 7.0, 0.0]), initial, idx, values)["mismatches"] == 0
    assert scatter.compare_set(np.array([5.0, 0.0, 7.0, 0.0]), initial, idx, values)["mismatches"] == 0
    # jax#27796's symptom: slot 0 left untouched; and a slot that was never written changed
    assert scatter.compare_set(np.array([0.0, 0.0, 7.0, 0.0]), initial, idx, values)["mismatches"] == 1
    assert scatter.compare_set(np.array([5.0, 1.0, 7.0, 0.0]), initial, idx, values)["mismatches"] == 1


def test_scatter_sum_check_allows_rounding_only(scatter):
    want, abs_sum, count = np.array([1.0, 3.0]), np.array([1.0, 3.0]), np.array([1, 2])
    assert scatter.compare_sum(np.array([1.0, 3.0 + 1e-7]), want, abs_sum, count, "float32")["mismatches"] == 0
    assert scatter.compare_sum(np.array([1.0, 3.01]), want, abs_sum, count, "float32")["mismatches"] == 1
    assert scatter.compare_sum(np.array([1.0, 3.01]), want, abs_sum, count, "bfloat16")["mismatches"] == 0
