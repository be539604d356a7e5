"""The elapsed-time line shown during long silent steps."""
import threading

import pytest

from babylm_jax.core.progress import elapsed


def test_elapsed_ticks_and_stops_even_on_error(capsys):
    with elapsed("silent step", refresh_s=0.001):
        threading.Event().wait(0.02)
    assert "silent step: 00:00" in capsys.readouterr().err
    with pytest.raises(KeyError):
        with elapsed("failing step", refresh_s=0.001):
            raise KeyError("x")
    assert not [t for t in threading.enumerate() if t.name.startswith("elapsed: ")]  # the ticking threads are gone
