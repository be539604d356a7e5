"""Shared test setup: 8 virtual CPU devices (set before jax is imported) and data fixtures."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pathlib  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def data_dir() -> pathlib.Path:
    """The real data sets (`BABYLM_DATA_DIR`); tests that need them skip without it."""
    path = os.environ.get("BABYLM_DATA_DIR")
    if not path or not pathlib.Path(path).is_dir():
        pytest.skip("BABYLM_DATA_DIR is not set to the shared data directory")
    return pathlib.Path(path)
