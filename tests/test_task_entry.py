"""A fine-tuning task added as one registry entry, and nothing else: its folder, files, fields, label map
and unlabelled rows are read, it is fine-tuned and scored end to end by `evaluate`, its per-task config
key exists, and the leakage check reads its texts. A minimal-pair task in a format of its own: one
entry and its format."""
import json
import pathlib

from babylm_jax import evaluate
from babylm_jax.eval.finetune import clue
from babylm_jax.tasks import formats, leakage, registry
from babylm_jax.tasks.formats import FileFormat, PairFields, RowFields

# Everything the task is: an existing format (FileFormat.ROWS) with fields, labels and files of its own, in a
# folder named unlike the task (TaskSpec.root is honoured).
ENTRY = registry.TaskSpec(
    "fixture_nli", "finetune", "accuracy", registry.TaskRunner.FINETUNE, folder="fixture_nli_v2",
    finetune=registry.FinetuneSpec(FileFormat.ROWS, ("no", "yes"), RowFields(("premise", "claim"), label="verdict", group="kind"),
                                   train=("train-*.jsonl",), dev=("valid.jsonl",), unlabelled="?"))
PREMISES = ("今天天气很好", "我们去公园散步吧", "他把杯子打碎了", "今天我们去公园")


def write_rows(path: pathlib.Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def fixture_rows(count: int, offset: int) -> list[dict]:
    """Rows whose claim holds 好 exactly when the verdict is yes; a kind per parity."""
    return [{"premise": PREMISES[(i + offset) % 4], "claim": "天气很好" if i % 2 else "杯子打碎了",
             "verdict": "yes" if i % 2 else "no", "kind": "even" if i % 2 == 0 else "odd"} for i in range(count)]


def write_task(data_dir: pathlib.Path) -> pathlib.Path:
    folder = data_dir / "fixture_nli_v2"
    write_rows(folder / "train-1.jsonl", fixture_rows(8, 0) + [{"premise": "好", "claim": "好", "verdict": "?"}])
    write_rows(folder / "train-2.jsonl", fixture_rows(8, 1))
    write_rows(folder / "valid.jsonl", fixture_rows(6, 2))
    return folder


def test_the_entry_is_read_through_its_reader_and_its_folder(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TASKS, ENTRY.name, ENTRY)
    folder = write_task(tmp_path)
    task = clue.load_clue_task(tmp_path, "fixture_nli")
    assert (task.kind, task.label_names, len(task.train), len(task.dev)) == ("classification", ("no", "yes"), 16, 6)
    assert task.dropped == {"train": 1, "dev": 0}  # the "?" row
    assert task.train[1].choices == (("我们去公园散步吧", "天气很好"),) and task.train[1].label == 1
    assert [e.group for e in task.dev[:2]] == ["even", "odd"]
    assert [p.name for p in ENTRY.find_files(tmp_path)] == ["train-1.jsonl", "train-2.jsonl", "valid.jsonl"]
    assert registry.select_tasks("all", tmp_path)[0] == [ENTRY]
    items = set(leakage.iter_eval_items(tmp_path))
    assert ("fixture_nli_v2", "我们去公园散步吧") in items and ("fixture_nli_v2", "天气很好") in items
    assert {task for task, _ in items} == {folder.name}


def test_the_entry_is_fine_tuned_and_scored_end_to_end(tmp_path, monkeypatch):
    from fixtures.run import make_run

    monkeypatch.setitem(registry.TASKS, ENTRY.name, ENTRY)
    write_task(tmp_path / "data")
    make_run(tmp_path / "run")  # a 1-layer model of width 16 and length 32
    output = tmp_path / "eval" / "results.json"
    evaluate.main(["evaluate", f"--workdir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'data'}",
                   "--tasks=fixture_nli", f"--output={output}", "--config.finetune.epochs=1",
                   "--config.finetune.tasks.fixture_nli.epochs=2", "--config.finetune.batch_size=4",
                   "--config.finetune.max_len=32", "--config.finetune.progress=False"])
    accuracy = json.loads(output.read_text())["fixture_nli"]["accuracy"]
    details = json.loads(output.with_name("results_details.json").read_text())["tasks"]["fixture_nli"]
    assert len(details["dev_accuracy_per_epoch"]) == 2  # the task's own config key
    assert accuracy == max(details["dev_accuracy_per_epoch"]) == details["dev_accuracy_per_epoch"][details["best_epoch"] - 1]
    assert (details["num_items"], details["num_train"], details["num_dropped"]) == (6, 16, {"train": 1, "dev": 0})
    assert set(details["per_kind"]) == {"even", "odd"}  # accuracy per the entry's group field


PAIRS_ENTRY = registry.TaskSpec("fixture_pairs", "zero_shot", "accuracy", registry.TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                                pair_format="fixture_pairs")
PAIRS_FORMAT = PairFields("good", "bad", "paradigm", None)


def test_a_minimal_pair_task_is_one_entry_and_its_format(tmp_path, monkeypatch):
    from fixtures.run import make_run

    monkeypatch.setitem(registry.TASKS, PAIRS_ENTRY.name, PAIRS_ENTRY)
    monkeypatch.setitem(formats.PAIR_FORMATS, "fixture_pairs", PAIRS_FORMAT)
    rows = [{"good": "我们去公园散步", "bad": "我们公园去散步", "paradigm": "order"},
            {"good": "他把杯子打碎了", "bad": "他把杯子打碎", "paradigm": "order"},
            {"good": "今天天气很好", "bad": "今天天气很", "paradigm": "ending"}]
    write_rows(tmp_path / "data" / "fixture_pairs" / "pairs.jsonl", rows)
    make_run(tmp_path / "run")
    output = tmp_path / "eval" / "results.json"
    evaluate.main(["evaluate", f"--workdir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'data'}",
                   "--tasks=fixture_pairs", f"--output={output}"])
    details = json.loads(output.with_name("results_details.json").read_text())["tasks"]["fixture_pairs"]
    assert details["num_items"] == 3 and set(details["per_uid"]) == {"order", "ending"}
    assert 0 <= json.loads(output.read_text())["fixture_pairs"]["accuracy"] <= 1
