"""experiments/benchmarks/conditions.py: hosts sharing a model name but not a microarchitecture get their own peaks."""
import pytest
from fixtures.scripts import load_script


@pytest.fixture(scope="module")
def conditions():
    return load_script("experiments/benchmarks/conditions.py")


def _cpuinfo(family: int, model: int) -> str:
    cpu = f"processor\t: {{}}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: AMD EPYC\n\n"
    return cpu.format(0) + cpu.format(1)


def test_cpu_name_carries_family_and_model(conditions):
    zen4, zen5 = conditions.cpu_name(_cpuinfo(25, 17)), conditions.cpu_name(_cpuinfo(26, 2))
    assert zen4 == "AMD EPYC (family 25 model 17)" and zen5 == "AMD EPYC (family 26 model 2)"
    assert conditions.cpu_name("") == "unknown CPU"


def test_the_cache_raises_the_best_peak_of_the_kind_only(conditions, tmp_path, monkeypatch):
    monkeypatch.setenv("BABYLM_PEAK_CACHE", str(tmp_path / "peak.json"))
    run = conditions.Conditions(n=64)
    run.peaks = [1e12 + run.best_peak]  # as if this run had measured more than ever known
    lines: list[str] = []
    run.report(lines.append)
    assert "peak_share_of_best_known: 1.00" in lines and not any(line.startswith("WARNING") for line in lines)
    assert conditions.Conditions(n=64).known_peak == run.peaks[0]
    slow = conditions.Conditions(n=64)
    slow.peaks = [0.1 * slow.known_peak]
    lines.clear()
    slow.report(lines.append)
    assert any(line.startswith("WARNING") for line in lines) and "peak_share_of_best_known: 0.10" in lines
