"""The official pipeline's evaluation_data/ read as it is: layout detection, CLUE and minimal-pair files in both layouts."""
import pathlib
import shutil

import pytest

from babylm_jax.tasks import layout
from babylm_jax.eval.finetune import clue
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.tasks import registry as tasks

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
        official, ours = ([(p.good, p.bad, p.uid, p.phenomenon) for p in minimal_pairs.read_pairs(spec.find_files(d), fmt)]
                          for d in (OFFICIAL, FIXTURES / "minimal_pairs"))
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


def test_leakage_and_unk_audit_read_the_official_layout():
    from babylm_jax.tasks import leakage
    from babylm_jax.tasks import unk_audit
    from babylm_jax.corpus.tokenizer import CharTokenizer

    official = set(leakage.iter_eval_items(OFFICIAL))
    ours = {item for item in set(leakage.iter_eval_items(FIXTURES / "clue")) | set(leakage.iter_eval_items(
        FIXTURES / "minimal_pairs")) if item[0] in ("zhoblimp", "hanzi_structure", "hanzi_pinyin", "afqmc", "ocnli",
                                                     "tnews", "cluewsc2020")}
    def without_ocnli(items):
        return {item for item in items if item[0] != "ocnli"}

    assert without_ocnli(official) == without_ocnli(ours) and {t for t, _ in official} == {t for t, _ in ours}
    # ocnli: the preparation dropped our fixture's "-" rows, and the official fixture has one -1 row of its own
    assert official - without_ocnli(official) - {("ocnli", "门开着"), ("ocnli", "门关着")} < ours
    tokenizer = CharTokenizer(["好", "明"], byte_fallback=False)
    audit = unk_audit.unk_audit(tokenizer, OFFICIAL)
    assert audit == unk_audit.unk_audit(tokenizer, FIXTURES / "minimal_pairs")
    assert set(audit) == {"hanzi_structure", "hanzi_pinyin"} and audit["hanzi_pinyin"]["items"] > 0
