"""Fine-tuning task readers, label maps, input layout and packed batches (no model)."""
import json
import re
import pathlib
import types

import numpy as np
import pytest

from babylm_jax.eval.finetune import classifier, clue, example_packing as packing
from babylm_jax.tasks.registry import get_task

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "clue"


def special_ids_tokenizer():
    """Enough of the Tokenizer interface for `build_input`: the fixed special ids."""
    return types.SimpleNamespace(pad_id=0, unk_id=1, bos_id=2, eos_id=3, mask_id=4, cls_id=5, sep_id=6)


def test_label_maps_are_the_official_ones():
    assert get_task("tnews").finetune.labels == ("100", "101", "102", "103", "104", "106", "107", "108", "109", "110",
                                                 "112", "113", "114", "115", "116")
    assert get_task("ocnli").finetune.labels == ("neutral", "entailment", "contradiction")
    assert get_task("cluewsc2020").finetune.labels == ("true", "false")
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
    assert len(task.train) == 3 and task.label_names == ("neutral", "entailment", "contradiction")
    assert [e.group for e in task.dev] == ["negation", "quantifier", "modality", "negation"]
    assert [e.label for e in task.dev] == [2, 1, 0, 1]
    predictions = np.array([2, 0, 0, 0])
    assert classifier.per_group_accuracy(task.dev, predictions) == {"modality": 1.0, "negation": 0.5, "quantifier": 0.0}


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
    for value, said in [(5, "a number (5)"), (None, "null"), (["a"], "a list")]:  # were read as "5", "None", "['a']"
        write_jsonl(tmp_path / "afqmc/train.json", [{"sentence1": value, "sentence2": "b", "label": "0"}])
        with pytest.raises(ValueError, match=rf"train.json:1: field 'sentence1' holds {re.escape(said)}, not a string"):
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


def random_split(count: int, max_len: int, seed: int = 0) -> clue.EncodedSplit:
    """Examples of 1-3 input rows of 2..max_len distinct-looking ids."""
    rng = np.random.default_rng(seed)
    ids = [[list(rng.integers(7, 50, size=n)) for n in rng.integers(2, max_len + 1, size=1 + i % 3)]
           for i in range(count)]
    return clue.EncodedSplit(ids, [i % 2 for i in range(count)], 0)


def unpack(batch: dict, split: clue.EncodedSplit, last: bool) -> list[int]:
    """Checks every slot of a packed batch against the split, by hand; the example indices it holds."""
    length = batch["tokens"].shape[1]
    seen = []
    for slot, i in enumerate(batch["index"]):
        if i < 0:
            assert not batch["present"][slot].any()
            continue
        seen.append(int(i))
        assert batch["labels"][slot] == split.labels[i]
        assert batch["present"][slot].sum() == len(split.ids[i])
        for c, expected in enumerate(split.ids[i]):
            row, at = divmod(int(batch["pool"][slot, c]), length)
            members = np.flatnonzero(batch["segments"][row] == batch["segments"][row, at])
            assert batch["segments"][row, at] > 0 and list(batch["tokens"][row, members]) == list(expected)
            assert (np.diff(members) == 1).all()  # one contiguous segment
            assert list(batch["positions"][row, members]) == list(range(len(expected)))
            assert at == (members[-1] if last else members[0])  # the pooled token: the last, or the first
    assert not batch["tokens"][batch["segments"] == 0].any()  # padding is pad ids
    return seen


@pytest.mark.parametrize("last", [True, False])
def test_train_batches_hold_exactly_batch_size_examples_and_drop_the_rest(last):
    split = random_split(37, 24)
    plan = packing.TrainPlan(split, 8, 24, 4, seed=1, epochs=2)
    assert len(plan.members) == 2 and plan.shapes and all(r % 4 == 0 for r in plan.shapes)
    epochs = [list(plan.batches(epoch, 3, last)) for epoch in range(2)]
    for batches in epochs:
        assert len(batches) == 37 // 8 == packing.steps_per_epoch(37, 8)
        seen = []
        for batch in batches:
            assert batch["tokens"].shape[0] in plan.shapes and batch["tokens"].shape[1] == 24
            assert batch["pool"].shape == (8, 3) and (batch["index"] >= 0).all()
            seen += unpack(batch, split, last)
        assert len(seen) == len(set(seen)) == 32  # 5 examples dropped this epoch, as drop_last does
    assert [b["index"].tolist() for b in epochs[0]] != [b["index"].tolist() for b in epochs[1]]
    again = packing.TrainPlan(split, 8, 24, 4, seed=1, epochs=2)  # the same seed, the same batches
    assert [b["index"].tolist() for b in again.batches(1, 3, last)] == [b["index"].tolist() for b in epochs[1]]
    # A split smaller than one batch still trains: one batch of all of it.
    small = random_split(5, 24)
    (batch,) = packing.TrainPlan(small, 8, 24, 1, seed=0, epochs=1).batches(0, 3, last)
    assert sorted(unpack(batch, small, last)) == list(range(5))


def test_rare_row_counts_are_padded_to_a_shape_in_use():
    lengths = [20] * 63 + [3]  # every batch of 4 needs 4 rows of 24, but the one holding the short row needs 3
    split = clue.EncodedSplit([[[7] * n] for n in lengths], [0] * 64, 0)
    plan = packing.TrainPlan(split, 4, 24, 1, seed=0, epochs=10, min_share=0.1)  # 3 rows: 1 step in 16
    assert plan.shapes == [4]
    assert {b["tokens"].shape[0] for e in range(10) for b in plan.batches(e, 1, True)} == {4}
    assert len(packing.TrainPlan(split, 4, 24, 1, seed=0, epochs=10, min_share=0.0).shapes) > 1


def test_packing_fills_rows_and_eval_batches_share_one_shape():
    split = random_split(200, 20, seed=3)
    batches = packing.eval_batches(split, 32, 8, 40, 3, last=True)
    assert {b["tokens"].shape for b in batches} == {(8, 32)} and {b["pool"].shape for b in batches} == {(40, 3)}
    seen = [i for b in batches for i in unpack(b, split, True)]
    assert sorted(seen) == list(range(200))
    real, rows = packing.padded_tokens(batches)
    assert real == sum(len(r) for rows_ in split.ids for r in rows_) and real / rows > 0.8
    with pytest.raises(ValueError, match="cannot hold an example of 3 input rows"):
        packing.eval_batches(split, 32, 2, 40, 3, last=True)


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
