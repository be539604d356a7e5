"""The task registry: one `TaskSpec` per official task; adding a task is one entry in `TASKS`.

A spec names the task's folder under the data directory (and in the official download), the
files it reads, their format (`formats`), its track and metric, what else it needs, and its
runner (a `TaskRunner`: `eval.runner.RUNNERS[spec.runner]` is the function that scores it). A
fine-tuning task's spec also holds a `FinetuneSpec`: its file format (`formats.FileFormat`, read by
`readers.READERS[format]`), row fields, label map and split files.
Everything that asks which tasks there are, where their files lie or which fields they hold
reads this table, so a task of a known format and runner is one entry here. It imports
nothing of evaluation.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Iterator

from babylm_jax.core.enums import StrictEnum
from babylm_jax.tasks import layout
from babylm_jax.tasks.formats import FileFormat, RowFields

SPLITS = ("train", "dev")  # a fine-tuning task's splits; dev is scored


class TaskRunner(StrictEnum):
    """Which runner scores a task (`TaskSpec.runner`); its function is `eval.runner.RUNNERS[runner]`."""

    MINIMAL_PAIRS = "minimal_pairs"
    FINETUNE = "finetune"
    WORD_FMRI = "word_fmri"
    FMRI = "fmri"


@dataclasses.dataclass(frozen=True)
class FinetuneSpec:
    """A fine-tuning task's part of its entry: how its files are read and what its labels are.

    `train` and `dev` list each split's file patterns under the task's folder, as `TaskSpec.files`
    does (all of them read, in order); a split that another task provides (`TaskSpec.needs`,
    e.g. diagnostic_nli's "ocnli:train") has none. In the official layout a CLUE task's
    splits are the official `<task>.{train,valid}.jsonl` instead.
    """

    reader: FileFormat  # the file format, read by tasks.readers.READERS[reader]
    labels: tuple[str, ...] = ()  # label names in id order, as the official pipeline numbers them; () = multiple choice
    fields: RowFields = RowFields(())  # a row's text segments, label and group (the row readers)
    train: tuple[str, ...] = ("train.json",)
    dev: tuple[str, ...] = ("dev.json",)
    unlabelled: str | None = None  # rows with this label are dropped (and -1 rows of the official preparation)

    @property
    def kind(self) -> str:
        """"classification" (one input row, a label) or "multiple_choice" (one row per option)."""
        return "classification" if self.labels else "multiple_choice"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task: where its files are, how it is scored, and which runner scores it.

    `files` lists glob patterns relative to `<data_dir>/<folder>`; every entry must match at
    least one file. An entry may offer alternatives separated by "|": the first alternative
    that matches is used (e.g. "ZhoBLiMP/*.jsonl|*.jsonl").
    """

    name: str
    track: str
    metric: str  # the key of the official value in results.json, e.g. "accuracy" or "mean"
    runner: TaskRunner  # the runner that scores it (its function: eval.runner.RUNNERS[runner])
    files: tuple[str, ...] = ()  # () for a fine-tuning task: its files are its splits' (`finetune`)
    folder: str = ""  # defaults to `name`
    pair_format: str = ""  # minimal pairs: the file format (tasks.formats.PAIR_FORMATS)
    unk_is_wrong: bool = False  # minimal pairs: the hanzi UNK rule
    needs: tuple[str, ...] = ()  # "<task>:<split>": another task's split it reads as its own (trains on)
    official_dir: str = ""  # its folder in the official evaluation_data/ download; "" = not there
    finetune: FinetuneSpec | None = None  # fine-tuning tasks: reader, labels, split files

    def __post_init__(self) -> None:
        if not isinstance(self.runner, TaskRunner):
            raise TypeError(f"task {self.name}: runner {self.runner!r} is not a TaskRunner (one of "
                            f"{', '.join(runner.name for runner in TaskRunner)})")
        if self.finetune is not None and not isinstance(self.finetune.reader, FileFormat):
            raise TypeError(f"task {self.name}: reader {self.finetune.reader!r} is not a FileFormat (one of "
                            f"{', '.join(fmt.name for fmt in FileFormat)})")

    @property
    def directory_name(self) -> str:
        return self.folder or self.name

    @property
    def official_clue(self) -> bool:
        """A CLUE task of the official download (full_eval/clue/<task>.{train,valid}.jsonl, config.yaml)."""
        return self.official_dir == layout.OFFICIAL_CLUE_DIR

    def in_official_layout(self, data_dir: str | pathlib.Path) -> bool:
        """Whether the task's files are read from the official download's folders under `data_dir`."""
        return bool(self.official_dir) and layout.detect(data_dir) == layout.OFFICIAL

    def root(self, data_dir: str | pathlib.Path) -> pathlib.Path:
        """The task's folder under `data_dir`, in the layout found there (`layout`)."""
        return pathlib.Path(data_dir) / (self.official_dir if self.in_official_layout(data_dir) else self.directory_name)

    def file_patterns(self, data_dir: str | pathlib.Path) -> tuple[str, ...]:
        """`files`, or a fine-tuning task's split patterns in the layout found under `data_dir`."""
        if self.finetune is None:
            return self.files
        return tuple(entry for split in SPLITS for entry in self.split_patterns(data_dir, split))

    def split_patterns(self, data_dir: str | pathlib.Path, split: str) -> tuple[str, ...]:
        """A fine-tuning split's file patterns: the entry's, or the official file of a CLUE task in the official layout."""
        if self.official_clue and self.in_official_layout(data_dir):
            return (f"{self.name}.{layout.OFFICIAL_SPLITS[split]}.jsonl",)
        return getattr(self.finetune, split)

    def split_source(self, split: str) -> "TaskSpec":
        """The task whose `split` files this one reads: the one its `needs` names for that split, else itself."""
        for need in self.needs:
            task, needed_split = need.split(":")
            if needed_split == split:
                return get_task(task)
        return self

    def split_files(self, data_dir: str | pathlib.Path, split: str) -> Iterator[pathlib.Path]:
        """The files of a fine-tuning split, pattern by pattern; FileNotFoundError at the first that matches nothing."""
        for entry in self.split_patterns(data_dir, split):
            yield from self._matches(data_dir, entry)

    def _matches(self, data_dir: str | pathlib.Path, entry: str) -> list[pathlib.Path]:
        """The files of a `files` entry under the task's folder: its first alternative ("|") that matches."""
        root = self.root(data_dir)
        for pattern in entry.split("|"):
            matches = sorted(p for p in root.glob(pattern) if p.is_file())
            if matches:
                return matches
        raise FileNotFoundError(f"task {self.name}: no file matches {entry!r} in {root}")

    def missing_split_file(self, data_dir: str | pathlib.Path, split: str) -> pathlib.Path | None:
        """The first of a fine-tuning split's patterns that matches no file (as a path), else None."""
        for entry in self.split_patterns(data_dir, split):
            try:
                self._matches(data_dir, entry)
            except FileNotFoundError:
                return self.root(data_dir) / entry
        return None

    def find_files(self, data_dir: str | pathlib.Path) -> list[pathlib.Path]:
        """All files the task reads, sorted; FileNotFoundError names what is missing."""
        root = self.root(data_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"task {self.name}: directory {root} does not exist")
        for need in self.needs:
            task, split = need.split(":")
            missing = get_task(task).missing_split_file(data_dir, split)
            if missing is not None:
                raise FileNotFoundError(f"task {self.name}: trains on {task}'s {split} split, and {missing} does not exist")
        return [path for entry in self.file_patterns(data_dir) for path in self._matches(data_dir, entry)]

    def missing_reason(self, data_dir: str | pathlib.Path) -> str | None:
        """None when the task's files are present, else why it cannot run."""
        try:
            self.find_files(data_dir)
        except FileNotFoundError as error:
            return str(error)
        return None


NLI_LABELS = ("neutral", "entailment", "contradiction")  # ocnli and diagnostic_nli
TNEWS_LABELS = tuple(str(code) for code in sorted({*range(100, 117)} - {105, 111}))  # 15 codes -> 0..14

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("zhoblimp", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("ZhoBLiMP/*.jsonl|*.jsonl",),
                 pair_format="zhoblimp", official_dir="full_eval/zhoblimp"),
        TaskSpec("xcomps_zh", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                 pair_format="xcomps"),
        TaskSpec("hanzi_structure", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                 pair_format="hanzi_structure", unk_is_wrong=True, official_dir="full_eval/hanzi_structure"),
        TaskSpec("hanzi_pinyin", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                 pair_format="hanzi_pinyin", unk_is_wrong=True, official_dir="full_eval/hanzi_pinyin"),
        TaskSpec("hanzi_structure_hidden", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                 pair_format="hanzi_structure", unk_is_wrong=True),
        TaskSpec("hanzi_pinyin_hidden", "zero_shot", "accuracy", TaskRunner.MINIMAL_PAIRS, ("*.jsonl",),
                 pair_format="hanzi_pinyin", unk_is_wrong=True),
        # Fine-tuning: the protocol per task is EvalSettings.finetune[name] (configs/eval.py); files and
        # labels as tasks/readers.py describes them.
        TaskSpec("afqmc", "finetune", "accuracy", TaskRunner.FINETUNE, official_dir=layout.OFFICIAL_CLUE_DIR,
                 finetune=FinetuneSpec(FileFormat.ROWS, ("0", "1"), RowFields(("sentence1", "sentence2")))),
        TaskSpec("ocnli", "finetune", "accuracy", TaskRunner.FINETUNE, official_dir=layout.OFFICIAL_CLUE_DIR,
                 finetune=FinetuneSpec(FileFormat.ROWS, NLI_LABELS, RowFields(("sentence1", "sentence2")), unlabelled="-")),
        TaskSpec("tnews", "finetune", "accuracy", TaskRunner.FINETUNE, official_dir=layout.OFFICIAL_CLUE_DIR,
                 finetune=FinetuneSpec(FileFormat.ROWS, TNEWS_LABELS, RowFields(("sentence",)))),
        TaskSpec("cluewsc2020", "finetune", "accuracy", TaskRunner.FINETUNE, official_dir=layout.OFFICIAL_CLUE_DIR,
                 finetune=FinetuneSpec(FileFormat.WSC, ("true", "false"), RowFields(("text",)))),
        TaskSpec("c3", "finetune", "accuracy", TaskRunner.FINETUNE, finetune=FinetuneSpec(
            FileFormat.C3, train=("c3-d-train.json", "c3-m-train.json"), dev=("c3-d-dev.json", "c3-m-dev.json"))),
        TaskSpec("diagnostic_nli", "finetune", "accuracy", TaskRunner.FINETUNE, needs=("ocnli:train",),
                 finetune=FinetuneSpec(FileFormat.ROWS, NLI_LABELS, RowFields(("sentence1", "sentence2"), group="phenomenon"),
                                       train=(), dev=("*.json|*.jsonl",))),
        # fMRI: the CogBench root; settings in EvalSettings.word_fmri / .fmri (configs/eval.py).
        TaskSpec("word_fmri", "fmri", "mean", TaskRunner.WORD_FMRI,
                 ("train/word/word.txt", "train/word_fmri/*_selected.mat", "dev/word/word.txt",
                  "dev/word_fmri/*_selected.mat"), folder="cogbench", official_dir=layout.OFFICIAL_FMRI_DIR),
        TaskSpec("fmri", "fmri", "mean", TaskRunner.FMRI,
                 ("train/story/story_*.txt", "train/fmri/*/*/story_*.mat", "dev/story/story_*.txt",
                  "dev/fmri/*/*/story_*.mat"), folder="cogbench", official_dir=layout.OFFICIAL_FMRI_DIR),
    )
}


def task_names(track: str) -> tuple[str, ...]:
    """The names of the track's tasks ("zero_shot", "finetune" or "fmri"), in registry order."""
    return tuple(name for name, spec in TASKS.items() if spec.track == track)


def official_tasks(track: str) -> tuple[str, ...]:
    """The track's tasks in the official download and the official config.yaml ("finetune": the CLUE four)."""
    return tuple(name for name, spec in TASKS.items() if spec.track == track and spec.official_dir)


def task_of_folder(folder: str) -> TaskSpec | None:
    """The task whose files a folder named `folder` holds (its own name, or a longer name it begins), else None."""
    matches = [spec for spec in TASKS.values() if folder == spec.directory_name or folder.startswith(spec.name + "_")]
    return max(matches, key=lambda spec: (folder == spec.directory_name, len(spec.name)), default=None)


def official_clue_task(path: pathlib.Path) -> str | None:
    """The task of a full_eval/clue/<task>.<split>.jsonl file of the official download, else None."""
    task = path.name.split(".")[0]
    return task if path.parent.name == "clue" and task in TASKS and get_task(task).official_clue else None


def get_task(name: str) -> TaskSpec:
    """The spec of `name`; a clear error listing the known tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[name]


def select_tasks(names: str, data_dir: str | pathlib.Path) -> tuple[list[TaskSpec], dict[str, str]]:
    """Parses `--tasks` ("all" or comma-separated names) into (runnable specs, skipped -> reason).

    With "all", tasks whose files are absent are skipped with their reason; a task named
    explicitly must be present (FileNotFoundError otherwise).
    """
    requested = [n.strip() for n in names.split(",") if n.strip()]
    if not requested:
        raise ValueError("--tasks is empty; give 'all' or comma-separated names from: " + ", ".join(TASKS))
    if requested == ["all"]:
        specs, skipped = [], {}
        for spec in TASKS.values():
            reason = spec.missing_reason(data_dir)
            if reason is None:
                specs.append(spec)
            else:
                skipped[spec.name] = reason
        return specs, skipped
    specs = [get_task(n) for n in dict.fromkeys(requested)]
    for spec in specs:
        spec.find_files(data_dir)
    return specs, {}
