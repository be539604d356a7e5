"""Tokens/s and MFU on completed steps, at any logging interval (a fake clock), and the peak they use."""
import json

import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.training import metrics, peaks

METRICS = {"loss": 1.0, "grad_norm": 1.0, "learning_rate": 1e-3}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _logger(tmp_path, monkeypatch, log_every, last_step=12):
    monkeypatch.setattr(metrics, "device_peak_flops", lambda: (1e12, "test peak"))
    config = tiny_config("unused")
    config.train.num_steps = last_step
    clock = Clock()
    clock.now = 100.0  # compiling took 100 s before the logger started: never counted
    run_config = RunConfig.from_config(config)
    logger = metrics.StepLogger(metrics.MetricsWriter(str(tmp_path)), run_config.model, run_config, log_every, last_step,
                                clock)
    return logger, clock


@pytest.mark.parametrize("log_every", [1, 3, 4])
def test_each_window_and_the_summary_time_completed_steps_only(tmp_path, monkeypatch, log_every):
    """Steps of 0.5 s whose time passes in the next step's dispatch (as a CPU backend that runs a
    step inside the call does) and a 10 s evaluation after step 6: every logged window and the
    summary give tokens_per_step / 0.5 s, whatever the logging interval."""
    logger, clock = _logger(tmp_path, monkeypatch, log_every)
    expected = logger.tokens_per_step / 0.5
    entries = []
    for step in range(1, 13):
        clock.now += 0.5  # step `step` runs (in this dispatch or in the block at a logging step)
        entry = logger.step_done(step, METRICS, 0.0)
        entries += [entry] if entry else []
        if step == 6:
            entries += [e for e in [logger.flush()] if e]
            clock.now += 10.0  # evaluation
            logger.restart_window()
    assert [e["step"] for e in entries] == [s for s in range(1, 13) if s % log_every == 0 or s == 12]
    for entry in entries:
        assert entry["tokens_per_s"] == pytest.approx(expected)
        flops = logger.step_flops(entry["step"]) / logger.tokens_per_step
        assert entry["mfu"] == pytest.approx(expected * flops / 1e12)
    assert logger.timer.total_seconds == pytest.approx(6.0)
    assert logger.timer.tokens_per_s() == pytest.approx(expected)
    assert logger.mean_mfu() == pytest.approx(12 * logger.step_flops(1) / 6.0 / 1e12)
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["tokens_per_s"] for r in logged] == [e["tokens_per_s"] for e in entries]


def test_a_logging_step_blocks_on_its_own_outputs(tmp_path, monkeypatch):
    """The logged step's metrics are fetched at its own step_done (not one step late), so its
    window closes when that step has completed."""
    logger, clock = _logger(tmp_path, monkeypatch, log_every=2)
    fetched = []
    monkeypatch.setattr(metrics.jax, "device_get", lambda x: fetched.append(x["step"]) or x)
    assert logger.step_done(1, {**METRICS, "step": 1}, 0.0) is None and fetched == []
    assert logger.step_done(2, {**METRICS, "step": 2}, 0.0)["step"] == 2 and fetched == [2]


def test_cpu_mfu_is_against_the_best_known_idle_peak_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(peaks, "startup_peak", lambda kind: 5e10)  # a busy start-up probe
    monkeypatch.setattr(peaks, "KNOWN_IDLE_PEAKS", {})  # whatever this host's kind, no figure by hand
    monkeypatch.setenv("BABYLM_PEAK_CACHE", str(tmp_path / "peak.json"))
    value, source = peaks.device_peak_flops()
    assert value == 5e10 and "measured at start-up" in source and "no higher idle figure known" in source
    kind = peaks.machine_kind(peaks.PROBE_N)
    (tmp_path / "peak.json").write_text(json.dumps({kind: 2e11}))
    value, source = peaks.device_peak_flops()
    assert value == 2e11 and "best known idle" in source and str(tmp_path / "peak.json") in source
    monkeypatch.setattr(peaks, "KNOWN_IDLE_PEAKS", {kind: 3e11})
    value, source = peaks.device_peak_flops()
    assert value == 3e11 and "training/peaks.py KNOWN_IDLE_PEAKS" in source


def test_the_start_up_probe_runs_once_a_process(monkeypatch):
    """A second run in one process (a notebook, the test suite) reuses the first run's probe."""
    calls = []
    monkeypatch.setattr(peaks, "measure_matmul_peak", lambda n, repeats: calls.append(n) or 4e10)
    peaks.startup_peak.cache_clear()
    try:
        assert peaks.startup_peak("cpu") == peaks.startup_peak("cpu") == 4e10 and calls == [peaks.PROBE_N]
    finally:
        peaks.startup_peak.cache_clear()
