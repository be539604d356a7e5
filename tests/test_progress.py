"""The elapsed-time line shown during long silent steps."""
import threading

import pytest

from babylm_jax.core.progress import StageTimes, elapsed


def test_elapsed_ticks_and_stops_even_on_error(capsys):
    with elapsed("silent step", refresh_s=0.001):
        threading.Event().wait(0.02)
    assert "silent step: 00:00" in capsys.readouterr().err
    with pytest.raises(KeyError):
        with elapsed("failing step", refresh_s=0.001):
            raise KeyError("x")
    assert not [t for t in threading.enumerate() if t.name.startswith("elapsed: ")]  # the ticking threads are gone


def test_stage_times_add_up_in_first_run_order():
    times = StageTimes()
    times.seconds = {"count words": 6.0, "tokenise": 3.0}
    with times.stage("count words"):
        pass
    assert list(times.seconds) == ["count words", "tokenise"] and times.seconds["count words"] >= 6.0
    assert times.summary("prepare").startswith("prepare took 9.0 s: count words 6.0 s (67%), tokenise 3.0 s (33%)")
    assert StageTimes().summary("prepare") == "prepare took 0.0 s"
