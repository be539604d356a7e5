"""Shared test setup: 8 virtual CPU devices (set before jax is imported) and data fixtures."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Reuse compiled programs across tests (and runs): many tests compile the same tiny steps.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(__import__("tempfile").gettempdir(), "babylm_jax_test_xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
from fixtures.fake_gcs import OFFLINE_CLIENTS  # noqa: E402  (before gcsfs and fsspec are imported)
from babylm_jax.core import platforms  # noqa: E402

platforms.check_xla_flags()  # once here: the commands the tests start in subprocesses need not check them again

os.environ.update(OFFLINE_CLIENTS)

import pathlib  # noqa: E402

import pytest  # noqa: E402
from fixtures.data import synthetic  # noqa: E402
from fixtures.data.synthetic import tiny_config  # noqa: E402,F401  (tests import it from here)


DATA_FIXTURE = "data_dir"  # the fixture that gives the real data sets; a test that takes it is marked `data`


def pytest_collection_modifyitems(config, items):
    """Marks `data` each test that takes the data_dir fixture, directly or through another fixture,
    so `-m "not data"` leaves it out without a decorator. Runs before pytest's `-m` selection."""
    for item in items:
        if DATA_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.data)


@pytest.fixture
def data_dir() -> pathlib.Path:
    """The real data sets (`BABYLM_DATA_DIR`); tests that need them skip without it (and are marked `data`)."""
    path = os.environ.get("BABYLM_DATA_DIR")
    if not path or not pathlib.Path(path).is_dir():
        pytest.skip("BABYLM_DATA_DIR is not set to the shared data directory")
    return pathlib.Path(path)


@pytest.fixture(scope="session")
def tiny_corpus_dir(tmp_path_factory) -> pathlib.Path:
    """A directory with one .txt file of synthetic documents separated by blank lines."""
    directory = tmp_path_factory.mktemp("tiny_corpus")
    (directory / "docs.txt").write_text("\n\n".join(synthetic.svo_documents(300)) + "\n", encoding="utf-8")
    return directory

