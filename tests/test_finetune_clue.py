"""Fine-tuning task readers, label maps, input layout and length-bucketed batches (no model)."""
import json
import pathlib
import types

import numpy as np
import pytest

from babylm_jax.eval import clue, finetune

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "clue"


def special_ids_tokenizer():
    """Enough of the Tokenizer interface for `build_input`: the fixed special ids."""
    return types.SimpleNamespace(pad_id=0, unk_id=1, bos_id=2, eos_id=3, mask_id=4, cls_id=5, sep_id=6)


def test_label_maps_are_the_official_ones():
    assert clue.TNEWS_LABELS == ("100", "101", "102", "103", "104", "106", "107", "108", "109", "110",
                                 "112", "113", "114", "115", "116")
    assert clue.NLI_LABELS == ("neutral", "entailment", "contradiction")
    assert clue.WSC_LABELS == ("true", "false")
    tnews = clue.load_clue_task(FIXTURES, "tnews")
    # int and string codes both map by sorted code: 100->0, 104->4, 116->14, 102->2, 110->9.
    assert [e.label for e in tnews.train] == [0, 14, 4]
    assert [e.label for e in tnews.dev] == [2, 9]
    assert tnews.train[0].choices == (("村里来了一位新老师",),)


def test_ocnli_drops_dash_and_counts_it():
    task = clue.load_clue_task(FIXTURES, "ocnli")
    assert [e.label for e in task.train] == [1, 2, 0]
    assert [e.label for e in task.dev] == [1, 2, 0]
    assert task.dropped == {"train": 1, "dev": 1}
    assert task.train[0].choices == (("他每天早上跑步", "他会运动"),)


def test_afqmc_and_wsc_inputs():
    afqmc = clue.load_clue_task(FIXTURES, "afqmc")
    assert [e.label for e in afqmc.train] == [1, 0, 1] and afqmc.num_outputs == 2
    wsc = clue.load_clue_task(FIXTURES, "cluewsc2020")
    assert [e.label for e in wsc.train] == [0, 1]  # "true" -> 0, "false" -> 1
    assert wsc.train[0].choices == (("\"她\"在这段话中指的是\"小红\"吗？", "小明把球给了小红，因为她想玩。"),)


def test_c3_multiple_choice_reader():
    task = clue.load_clue_task(FIXTURES, "c3")
    assert task.kind == "multiple_choice" and task.num_outputs == 1
    assert [len(e.choices) for e in task.train] == [3, 2, 4]
    assert [e.label for e in task.train] == [1, 0, 1]
    assert task.train[0].choices[1] == ("男：你几点下班？\n女：六点。", "女的几点下班？", "六点")
    assert [e.label for e in task.dev] == [0, 1]
    assert len(clue.load_clue_task(FIXTURES, "c3", limit=1).train) == 1


def test_diagnostic_nli_trains_on_ocnli():
    task = clue.load_clue_task(FIXTURES, "diagnostic_nli")
    assert len(task.train) == 3 and task.label_names == clue.NLI_LABELS
    assert [e.group for e in task.dev] == ["negation", "quantifier", "modality", "negation"]
    assert [e.label for e in task.dev] == [2, 1, 0, 1]
    predictions = np.array([2, 0, 0, 0])
    assert finetune.per_group_accuracy(task.dev, predictions) == {"modality": 1.0, "negation": 0.5, "quantifier": 0.0}


def write_jsonl(path: pathlib.Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_bad_input_messages(tmp_path):
    write_jsonl(tmp_path / "afqmc/train.json", [{"sentence1": "a", "sentence2": "b", "label": "0"},
                                                 {"sentence1": "a", "sentence2": "b", "label": "2"}])
    write_jsonl(tmp_path / "afqmc/dev.json", [{"sentence1": "a", "sentence2": "b", "label": "0"}])
    with pytest.raises(ValueError, match=r"afqmc/train.json:2: unknown label '2'"):
        clue.load_clue_task(tmp_path, "afqmc")
    write_jsonl(tmp_path / "afqmc/train.json", [{"sentence1": "a", "label": "0"}])
    with pytest.raises(ValueError, match=r"train.json:1: missing field 'sentence2'"):
        clue.load_clue_task(tmp_path, "afqmc")
    (tmp_path / "afqmc/train.json").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.json:1: not valid JSON"):
        clue.load_clue_task(tmp_path, "afqmc")
    (tmp_path / "afqmc/train.json").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.json: no usable examples \(empty split\)"):
        clue.load_clue_task(tmp_path, "afqmc")
    (tmp_path / "c3").mkdir()
    (tmp_path / "c3/c3-d-train.json").write_text(json.dumps(
        [[["p"], [{"question": "q", "choice": ["x", "y"], "answer": "z"}], "d-9"]]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"c3-d-train.json item 0 \(id 'd-9'\) question 0: answer 'z' is not among"):
        clue.load_clue_task(tmp_path, "c3")
    with pytest.raises(ValueError, match="unknown fine-tuning task 'cmnli'"):
        clue.load_clue_task(tmp_path, "cmnli")


def test_input_layout_and_truncation():
    tok = special_ids_tokenizer()
    assert clue.build_input([[10, 11], [12]], "mlm", 16) == ([5, 10, 11, 6, 12, 6], False)
    assert clue.build_input([[10, 11], [12]], "hybrid", 16) == ([5, 10, 11, 6, 12, 6], False)
    assert clue.build_input([[10, 11], [12]], "causal", 16) == ([2, 10, 11, 3, 12, 3], False)
    assert clue.build_input([[10, 11]], "causal", 16) == ([2, 10, 11, 3], False)
    assert clue.build_input([[10, 11]], "mlm", 16) == ([5, 10, 11, 6], False)
    # Budget 8 - 3 specials = 5: the longest segment loses its tail first, the later one on ties.
    ids, truncated = clue.build_input([[10, 11, 12, 13, 14, 15], [20, 21, 22]], "mlm", 8)
    assert truncated and len(ids) == 8 and ids == [5, 10, 11, 12, 6, 20, 21, 6]
    examples = [clue.Example((("ab", "c"),), 0), clue.Example((("abcdefgh", "c"),), 1)]
    char_tok = types.SimpleNamespace(**vars(tok), encode=lambda s: [10 + ord(ch) - ord("a") for ch in s])
    split = clue.encode_split(examples, char_tok, "mlm", 6)
    assert split.num_truncated == 1 and split.labels == [0, 1]
    assert split.ids[0] == [[5, 10, 11, 6, 12, 6]] and split.ids[1] == [[5, 10, 11, 6, 12, 6]]


def test_batches_cover_every_example_once_in_fixed_bucket_shapes():
    lengths = finetune.bucket_lengths(24, (8, 16, 64))
    assert lengths == (8, 16, 24)
    rng = np.random.default_rng(0)
    ids = [[list(range(7, 7 + n)) for _ in range(1 + i % 3)] for i, n in enumerate(rng.integers(2, 25, size=37))]
    split = clue.EncodedSplit(ids, [i % 2 for i in range(37)], 0)
    for shuffle in (None, np.random.default_rng(1)):
        batches = finetune.make_batches(split, 4, lengths, 3, shuffle)
        seen = []
        for batch in batches:
            b, c, length = batch["tokens"].shape
            assert (b, c) == (4, 3) and length in lengths
            for slot, i in enumerate(batch["index"]):
                if i < 0:
                    assert not batch["mask"][slot].any()
                    continue
                seen.append(i)
                assert batch["labels"][slot] == split.labels[i]
                for row, expected in enumerate(ids[i]):
                    assert batch["mask"][slot, row].sum() == len(expected)
                    assert list(batch["tokens"][slot, row, : len(expected)]) == expected
                    # the smallest bucket that fits the example's longest row
                    assert length == min(x for x in lengths if x >= max(len(r) for r in ids[i]))
                assert not batch["mask"][slot, len(ids[i]):].any()
        assert sorted(seen) == list(range(37))


def test_real_data_counts(data_dir):
    expected = {"afqmc": (34334, 4316), "ocnli": (9985, 2950), "tnews": (3195, 1098), "cluewsc2020": (1244, 304)}
    for name, (n_train, n_dev) in expected.items():
        task = clue.load_clue_task(data_dir, name)
        assert (len(task.train), len(task.dev)) == (n_train, n_dev), name
    ocnli = clue.load_clue_task(data_dir, "ocnli")
    assert ocnli.dropped == {"train": 15, "dev": 50}
    tnews = clue.load_clue_task(data_dir, "tnews")
    assert sorted({e.label for e in tnews.train}) == list(range(15))
    wsc = clue.load_clue_task(data_dir, "cluewsc2020")
    assert sum(e.label == 0 for e in wsc.dev) == 111  # "true" in dev
    afqmc = clue.load_clue_task(data_dir, "afqmc")
    assert sum(e.label for e in afqmc.dev) == 1338


def test_limit_spreads_over_label_sorted_files(data_dir):
    """tnews files are sorted by label: the first 64 rows hold one label, a spread subset many."""
    full = clue.load_clue_task(data_dir, "tnews")
    quick = clue.load_clue_task(data_dir, "tnews", limit=64)
    assert len(quick.train) == len(quick.dev) == 64
    assert len({e.label for e in full.train[:64]}) == 1
    assert len({e.label for e in quick.train}) >= 10 and len({e.label for e in quick.dev}) >= 10
    assert quick.train[0] == full.train[0] and quick.train[-1] == full.train[-1]
