"""Several runs' results in one table (CSV, Markdown) and the official leaderboard JSON per run."""
import csv
import json

import pytest

from babylm_jax.eval import gather


def _write(path, results):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results), encoding="utf-8")


def test_gather_runs_into_one_table_and_leaderboard_files(tmp_path, capsys):
    _write(tmp_path / "a" / "eval" / "results.json",  # a training workdir
           {"fmri": {"mean": 0.05}, "zhoblimp": {"accuracy": 0.75}, "afqmc": {"accuracy": 0.69}})
    _write(tmp_path / "b" / "results.json", {"zhoblimp": {"accuracy": 0.5}, "xcomps_zh": {"accuracy": 0.6}})
    _write(tmp_path / "x" / "b" / "results.json", {"word_fmri": {"mean": 0.1}})  # same folder name as b
    written = gather.main([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "x" / "b" / "results.json"),
                           "--output", str(tmp_path / "out")])
    rows = list(csv.reader((tmp_path / "out" / "gather.csv").open()))
    assert rows[0] == ["run", "zhoblimp", "xcomps_zh", "afqmc", "word_fmri", "fmri", "mean", "tasks"]  # registry order
    assert rows[1] == ["a", "0.75", "", "0.69", "", "0.05", str((0.75 + 0.69 + 0.05) / 3), "3"]
    assert rows[2][0] == f"{tmp_path.name}/b" and rows[3][0] == "x/b"  # names made unique
    assert rows[2][1:3] == ["0.5", "0.6"] and rows[2][-2:] == ["0.55", "2"]
    markdown = (tmp_path / "out" / "gather.md").read_text()
    assert "| a | 0.7500 | - | 0.6900 | - | 0.0500 | 0.4967 | 3 |" in markdown
    assert markdown in capsys.readouterr().out
    leaderboard = json.loads(written["leaderboard a"].read_text())
    assert leaderboard == {"zhoblimp": {"accuracy": 0.75}, "afqmc": {"accuracy": 0.69}, "fmri": {"mean": 0.05}}
    assert list(leaderboard) == ["zhoblimp", "afqmc", "fmri"]
    assert json.loads((tmp_path / "out" / "leaderboard_x_b.json").read_text()) == {"word_fmri": {"mean": 0.1}}


def test_gather_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--gather .*nothing: no results.json or eval/results.json"):
        gather.results_file(tmp_path / "nothing")
    _write(tmp_path / "bad" / "results.json", {"zhoblimp": 0.5})
    with pytest.raises(ValueError, match=r"results.json: task 'zhoblimp' must map metric names to numbers"):
        gather.gather([tmp_path / "bad"], tmp_path / "out")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json:1: not valid JSON"):
        gather.gather([tmp_path / "broken.json"], tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written before every run is read
