"""pytest markers: each one used is registered in pyproject.toml with a description, unknown ones are
an error (--strict-markers), and each test that takes the real data sets (the data_dir fixture) is
marked `data`. Checked over the tests this session collected."""
import pathlib
import re
import tomllib

import pytest
from conftest import DATA_FIXTURE

REPO = pathlib.Path(__file__).resolve().parents[1]
OURS = {"slow", "data", "tpu", "gpu"}
PYTESTS_OWN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}


def _options() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]


def _registered(config: pytest.Config) -> dict[str, str]:
    return dict(line.split(":", 1) for line in config.getini("markers") if ":" in line)


def test_our_markers_are_registered_with_a_description_and_strictly(pytestconfig):
    options = _options()
    assert "--strict-markers" in options["addopts"].split()
    assert "-m" not in options["addopts"].split()  # the README's command runs every test
    registered = {name.strip(): text.strip() for name, text in _registered(pytestconfig).items()}
    assert OURS <= set(registered) and all(registered[name] for name in OURS), registered
    with pytest.raises(pytest.fail.Exception, match="not found in `markers` configuration option"):
        pytest.mark.sloww  # a misspelt marker is an error, not a new marker that selects nothing


def test_every_marker_used_is_registered_and_data_tests_are_marked_data(request):
    registered = {name.strip().split("(")[0] for name in _registered(request.config)}
    for item in request.session.items:
        unknown = {mark.name for mark in item.iter_markers()} - registered - PYTESTS_OWN
        assert not unknown, f"{item.nodeid}: markers {sorted(unknown)} are not registered in pyproject.toml"
        if DATA_FIXTURE in getattr(item, "fixturenames", ()):
            assert item.get_closest_marker("data"), f"{item.nodeid} takes {DATA_FIXTURE} but is not marked data"


def test_only_the_data_fixture_reads_the_data_directory_variable():
    """A test reaching the real data by another road would miss the `data` marker."""
    reads = re.compile(r"environ(?:\.get\(|\[)\s*[\"']BABYLM_DATA_DIR|getenv\(\s*[\"']BABYLM_DATA_DIR")
    tests = pathlib.Path(__file__).parent
    readers = sorted(str(p.relative_to(tests)) for p in tests.rglob("*.py") if reads.search(p.read_text(encoding="utf-8")))
    assert readers == ["conftest.py"], readers
