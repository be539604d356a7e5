"""What a reader meets first stays short and timeless: no issue numbers, dates or machine loads in the
package or the configs (measurements live in experiments/README.md), a README of at most README_LINES
lines beside docs/, and a base config that says only what differs from the fields' defaults."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README_LINES = 150
BASE_CONFIG_LINES = 60
DATED = re.compile(r"[Ii]ssue[ -]\d+|#\d{2,}\b|\b20\d\d-\d\d-\d\d\b|\bload (average )?\d|turn ago")


def test_dated_text_is_found_where_it_stands():
    found = [bool(DATED.search(line)) for line in ("see issue 26", "the issue-26 study", "(2026-12-01)",
                                                   "at load 0.04", "fixes #47", "a turn ago", "loads a file")]
    assert found == [True, True, True, True, True, True, False]


def test_no_issue_numbers_dates_or_loads_in_the_package_or_configs():
    files = [*(ROOT / "babylm_jax").rglob("*.py"), *(ROOT / "configs").glob("*.py")]
    dated = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if DATED.search(line)]
    assert not dated, "\n".join(dated)


def test_the_readme_is_short_and_links_every_page_of_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_LINES
    pages = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md"))
    assert pages and [page for page in pages if f"]({page}" not in readme] == []


def test_the_base_config_is_a_short_recipe():
    assert len((ROOT / "configs" / "base.py").read_text(encoding="utf-8").splitlines()) <= BASE_CONFIG_LINES
