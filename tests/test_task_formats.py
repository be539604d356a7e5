"""One home for the field names of the task files: every reader and the task registry agree with it."""
import json

import pytest

from babylm_jax.tasks import leakage
from babylm_jax.tasks import formats as task_formats
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.tasks import readers, registry
from babylm_jax.tasks.registry import TASKS


def test_hanzi_rows_read_in_either_shape(tmp_path):
    hub = {"sentence_good": "好", "sentence_bad": "坏", "task": "t1", "meta_structure": "左右"}
    prepared = {"sentence_good": "甲", "sentence_bad": "乙", "UID": "u1", "phenomenon": "p1"}
    path = tmp_path / "hanzi.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in (hub, prepared)) + "\n", encoding="utf-8")
    pairs = minimal_pairs.read_pairs([path], "hanzi_structure")
    assert [(p.good, p.uid, p.phenomenon) for p in pairs] == [("好", "t1", "左右"), ("甲", "u1", "p1")]
    assert task_formats.pair_fields("hanzi_pinyin", {"condition": "c"}).uid == "condition"


def test_xcomps_uid_from_the_row_or_the_file():
    assert task_formats.pair_fields("xcomps", {"uid": "x"}).uid == "uid"
    assert task_formats.pair_fields("xcomps", {"UID": "x"}).uid == "UID"
    assert task_formats.pair_fields("xcomps", {}).uid is None


def test_registry_folders_match_the_formats():
    zero_shot = [spec for spec in TASKS.values() if spec.track == "zero_shot"]
    assert len(zero_shot) == 6
    for spec in zero_shot:
        assert registry.task_of_folder(spec.name) is spec and spec.pair_format in task_formats.PAIR_FORMATS
    assert registry.task_of_folder("hanzi_pinyin_extra").name == "hanzi_pinyin"
    assert registry.task_of_folder("cogbench").name == "word_fmri" and registry.task_of_folder("clue") is None
    assert registry.official_tasks("finetune") == ("afqmc", "ocnli", "tnews", "cluewsc2020")
    assert registry.official_tasks("zero_shot") == ("zhoblimp", "hanzi_structure", "hanzi_pinyin")
    assert registry.official_tasks("fmri") == ("word_fmri", "fmri")
    finetune = [spec for spec in TASKS.values() if spec.track == "finetune"]
    assert len(finetune) == 6 and all(spec.finetune.reader in readers.READERS for spec in finetune)
    assert set(readers.READERS) == set(task_formats.FileFormat)


def test_every_runner_has_its_function_and_an_entry_names_its_runner_and_format_by_member():
    from babylm_jax.eval.runner import RUNNERS

    assert set(RUNNERS) == set(registry.TaskRunner)
    with pytest.raises(TypeError, match="task t: runner 'finetune' is not a TaskRunner"):
        registry.TaskSpec("t", "finetune", "accuracy", "finetune")
    with pytest.raises(TypeError, match="task t: reader 'rows' is not a FileFormat"):
        registry.TaskSpec("t", "finetune", "accuracy", registry.TaskRunner.FINETUNE,
                          finetune=registry.FinetuneSpec("rows"))


def test_leakage_reads_every_text_field(tmp_path):
    rows = {
        "zhoblimp": {"sentence_good": "一", "sentence_bad": "二", "UID": "u", "phenomenon": "p"},
        "xcomps_zh": {"acceptable_sent": "三", "unacceptable_sent": "四"},
        "hanzi_pinyin_hidden": {"sentence_good": "五", "sentence_bad": "六", "condition": "c"},
        "tnews": {"sentence": "七", "label": "100"},
        "cluewsc2020": {"text": "八", "label": "true", "target": {}},
        "unknown_task": {"text": "九"},
    }
    for folder, row in rows.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "dev.json").write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert set(leakage.iter_eval_items(tmp_path)) == {
        ("zhoblimp", "一"), ("zhoblimp", "二"), ("xcomps_zh", "三"), ("xcomps_zh", "四"),
        ("hanzi_pinyin_hidden", "五"), ("hanzi_pinyin_hidden", "六"), ("tnews", "七"), ("cluewsc2020", "八"),
    }


def test_files_from_windows_read_as_their_text_and_other_encodings_are_named(tmp_path):
    """A byte-order mark (Notepad's UTF-8) and CRLF line ends are read as the text; UTF-16 names file and line."""
    from babylm_jax.core import jsonl

    rows = [{"sentence_good": "我们去。", "sentence_bad": "去我们。"}, {"sentence_good": "好。", "sentence_bad": "好好。"}]
    text = "\r\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\r\n"
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(text.encode("utf-8-sig"))
    assert [row for _, row in jsonl.read_jsonl(path)] == rows
    (tmp_path / "word.txt").write_bytes("\ufeff我们\r\n北京\r\n".encode())
    assert jsonl.read_text(tmp_path / "word.txt").splitlines() == ["我们", "北京"]  # the first word without U+FEFF
    (tmp_path / "c3.json").write_bytes(json.dumps(rows).encode("utf-8-sig"))
    assert jsonl.read_json(tmp_path / "c3.json", "fix") == rows
    path.write_bytes(text.encode("utf-16"))
    with pytest.raises(ValueError, match=r"pairs.jsonl:1: not UTF-8 text \(byte 0: invalid start byte\); save it as "
                                         r"UTF-8 \(from UTF-16"):
        list(jsonl.read_jsonl(path))
    (tmp_path / "word.txt").write_bytes("我们".encode("utf-16"))
    with pytest.raises(ValueError, match=r"word.txt: not UTF-8 text"):
        jsonl.read_text(tmp_path / "word.txt")
