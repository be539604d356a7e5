"""The official pipeline's evaluation_data/ read as it is: layout detection, CLUE and minimal-pair files in both layouts."""
import pathlib
import shutil

import pytest

from babylm_jax.eval import clue, layout, minimal_pairs, tasks

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
OFFICIAL = FIXTURES / "official_layout"  # what the official prepare_chinese_data.py writes, from our fixtures' items


def test_layout_is_detected_and_named(tmp_path):
    assert layout.detect(OFFICIAL) == layout.OFFICIAL
    assert "official pipeline layout (full_eval/ under" in layout.describe(OFFICIAL)
    assert layout.detect(FIXTURES / "clue") == layout.OURS
    assert "our layout" in layout.describe(FIXTURES / "clue")
    assert "its parent" in layout.describe(OFFICIAL / "full_eval")
    (tmp_path / "cogbench-fmri-0415").mkdir()
    assert layout.detect(tmp_path) == layout.OFFICIAL


@pytest.mark.parametrize("name", ["afqmc", "ocnli", "tnews", "cluewsc2020"])
def test_clue_tasks_read_the_same_in_both_layouts(name):
    ours = clue.load_clue_task(FIXTURES / "clue", name)
    official = clue.load_clue_task(OFFICIAL, name)
    assert official.train == ours.train and official.dev == ours.dev
    assert official.label_names == ours.label_names
    if name == "ocnli":  # a -1 row of the prepared file is dropped and counted
        assert official.dropped == {"train": 1, "dev": 0}


def test_minimal_pairs_read_the_same_in_both_layouts():
    for name in ("zhoblimp", "hanzi_structure", "hanzi_pinyin"):
        spec = tasks.get_task(name)
        assert spec.root(OFFICIAL) == OFFICIAL / "full_eval" / name
        fmt = spec.pair_format
        official = minimal_pairs.read_pairs(spec.find_files(OFFICIAL), fmt)
        ours = minimal_pairs.read_pairs(spec.find_files(FIXTURES / "minimal_pairs"), fmt)
        assert official == ours, name  # hanzi_structure is prepared there, hanzi_pinyin in the hub's shape


def test_all_tasks_in_the_official_layout(tmp_path):
    data_dir = tmp_path / "evaluation_data"
    shutil.copytree(OFFICIAL, data_dir)
    shutil.copytree(FIXTURES / "clue" / "diagnostic_nli", data_dir / "diagnostic_nli")  # hidden: our folder name
    for split in ("train", "dev"):
        for relative in ("word/word.txt", "word_fmri/01_selected.mat", "story/story_1.txt", "fmri/Language/01/story_1.mat"):
            path = data_dir / "cogbench-fmri-0415" / split / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    specs, skipped = tasks.select_tasks("all", data_dir)
    assert [s.name for s in specs] == ["zhoblimp", "hanzi_structure", "hanzi_pinyin", "afqmc", "ocnli", "tnews",
                                       "cluewsc2020", "diagnostic_nli", "word_fmri", "fmri"]
    assert sorted(skipped) == ["c3", "hanzi_pinyin_hidden", "hanzi_structure_hidden", "xcomps_zh"]
    assert tasks.get_task("fmri").root(data_dir) == data_dir / "cogbench-fmri-0415"
    assert [p.name for p in tasks.get_task("tnews").find_files(data_dir)] == ["tnews.train.jsonl", "tnews.valid.jsonl"]
    diagnostic = clue.load_clue_task(data_dir, "diagnostic_nli")
    assert diagnostic.train == clue.load_clue_task(OFFICIAL, "ocnli").train  # trained on clue/ocnli.train.jsonl


def test_prepared_clue_rows_with_bad_labels_name_file_and_line(tmp_path):
    folder = tmp_path / "full_eval" / "clue"
    folder.mkdir(parents=True)
    (folder / "afqmc.valid.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "label": 0}\n', encoding="utf-8")
    (folder / "afqmc.train.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "label": "1"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"afqmc.train.jsonl:1: label '1' must be an integer id"):
        clue.load_clue_task(tmp_path, "afqmc")
    (folder / "afqmc.train.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "label": 2}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"afqmc.train.jsonl:1: label 2 out of range 0..1"):
        clue.load_clue_task(tmp_path, "afqmc")
    (folder / "afqmc.train.jsonl").write_text('{"sentence1": "a", "label": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"afqmc.train.jsonl:1: missing field 'sentence2'"):
        clue.load_clue_task(tmp_path, "afqmc")
