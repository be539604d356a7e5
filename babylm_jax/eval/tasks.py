"""The task registry: one `TaskSpec` per official task; adding a task is one entry in `TASKS`.

A spec names the task's folder under the data directory, the files it needs, its track and
metric, and its runner as a "module:function" string that is imported only when the task
runs (so this table never imports fine-tuning or fMRI code). A runner is called as

    runner(spec, loaded, data_dir, options) -> results.TaskResult

where `loaded` is a `training.checkpoint.LoadedModel`, `data_dir` the data root and
`options` an `EvalOptions`. Task-specific settings a runner needs go in `spec.settings`.
"""
from __future__ import annotations

import dataclasses
import importlib
import pathlib
from typing import Any, Callable, Mapping

from babylm_jax.eval import layout
from babylm_jax.eval.results import TaskResult

TRACKS = ("zero_shot", "finetune", "fmri")


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """Options the CLI passes to every runner; a runner reads the ones it needs."""

    limit: int | None = None  # score only the first N items of each task (deterministic)
    batch_size: int = 256  # rows per scoring batch (minimal pairs): 8192 tokens at row_len 32
    row_len: int = 32  # packed row length for scoring kernels (short rows waste less attention)
    within_word_l2r: bool = False  # PLL variant of Kauf & Ivanova (2023); masked/hybrid only
    finetune_epochs: int | None = None  # None = each task's official number of epochs
    fmri_layer: int | None = None  # None = the official layer (the last)
    seed: int = 42
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task: where its files are, how it is scored, and which function runs it.

    `files` lists glob patterns relative to `<data_dir>/<folder>`; every entry must match at
    least one file. An entry may offer alternatives separated by "|": the first alternative
    that matches is used (e.g. "ZhoBLiMP/*.jsonl|*.jsonl").
    """

    name: str
    track: str
    metric: str  # the key of the official value in results.json, e.g. "accuracy" or "mean"
    runner: str  # "package.module:function"
    files: tuple[str, ...]
    folder: str = ""  # defaults to `name`
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def directory_name(self) -> str:
        return self.folder or self.name

    def root(self, data_dir: str | pathlib.Path) -> pathlib.Path:
        """The task's folder under `data_dir`, in the layout found there (`layout`)."""
        return layout.official_location(data_dir, self.name) or pathlib.Path(data_dir) / self.directory_name

    def file_patterns(self, data_dir: str | pathlib.Path) -> tuple[str, ...]:
        """`files`, or the official file names of a CLUE task in the official layout."""
        if layout.official_clue_file(data_dir, self.name, "train") is not None:
            return tuple(layout.official_clue_file(data_dir, self.name, s).name for s in layout.OFFICIAL_SPLITS)
        return self.files

    def find_files(self, data_dir: str | pathlib.Path) -> list[pathlib.Path]:
        """All files the task reads, sorted; FileNotFoundError names what is missing."""
        root = self.root(data_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"task {self.name}: directory {root} does not exist")
        found: list[pathlib.Path] = []
        for entry in self.file_patterns(data_dir):
            for pattern in entry.split("|"):
                matches = sorted(p for p in root.glob(pattern) if p.is_file())
                if matches:
                    found.extend(matches)
                    break
            else:
                raise FileNotFoundError(f"task {self.name}: no file matches {entry!r} in {root}")
        return found

    def missing_reason(self, data_dir: str | pathlib.Path) -> str | None:
        """None when the task's files are present, else why it cannot run."""
        try:
            self.find_files(data_dir)
        except FileNotFoundError as error:
            return str(error)
        return None

    def run(self, loaded: Any, data_dir: str | pathlib.Path, options: EvalOptions) -> TaskResult:
        """Imports the runner now (lazily) and runs the task."""
        return _import_runner(self.runner)(self, loaded, pathlib.Path(data_dir), options)


def _import_runner(target: str) -> Callable[..., TaskResult]:
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


_MINIMAL_PAIRS = "babylm_jax.eval.minimal_pairs:run_task"
_FINETUNE = "babylm_jax.eval.finetune:run_task"

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("zhoblimp", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("ZhoBLiMP/*.jsonl|*.jsonl",),
                 settings={"format": "zhoblimp"}),
        TaskSpec("xcomps_zh", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("*.jsonl",),
                 settings={"format": "xcomps"}),
        TaskSpec("hanzi_structure", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("*.jsonl",),
                 settings={"format": "hanzi_structure", "unk_is_wrong": True}),
        TaskSpec("hanzi_pinyin", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("*.jsonl",),
                 settings={"format": "hanzi_pinyin", "unk_is_wrong": True}),
        TaskSpec("hanzi_structure_hidden", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("*.jsonl",),
                 settings={"format": "hanzi_structure", "unk_is_wrong": True}),
        TaskSpec("hanzi_pinyin_hidden", "zero_shot", "accuracy", _MINIMAL_PAIRS, ("*.jsonl",),
                 settings={"format": "hanzi_pinyin", "unk_is_wrong": True}),
        # Fine-tuning: settings are per-task overrides of finetune.FinetuneOptions.
        TaskSpec("afqmc", "finetune", "accuracy", _FINETUNE, ("train.json", "dev.json")),
        TaskSpec("ocnli", "finetune", "accuracy", _FINETUNE, ("train.json", "dev.json")),
        TaskSpec("tnews", "finetune", "accuracy", _FINETUNE, ("train.json", "dev.json")),
        TaskSpec("cluewsc2020", "finetune", "accuracy", _FINETUNE, ("train.json", "dev.json"),
                 settings={"epochs": 30}),
        TaskSpec("c3", "finetune", "accuracy", _FINETUNE,
                 ("c3-d-train.json", "c3-m-train.json", "c3-d-dev.json", "c3-m-dev.json")),
        TaskSpec("diagnostic_nli", "finetune", "accuracy", _FINETUNE, ("*.json|*.jsonl",)),
        # fMRI: the CogBench root; settings override fmri.WordFmriSettings / fmri.FmriSettings.
        TaskSpec("word_fmri", "fmri", "mean", "babylm_jax.eval.fmri:run_word_fmri",
                 ("train/word/word.txt", "train/word_fmri/*_selected.mat", "dev/word/word.txt",
                  "dev/word_fmri/*_selected.mat"), folder="cogbench"),
        TaskSpec("fmri", "fmri", "mean", "babylm_jax.eval.fmri:run_fmri",
                 ("train/story/story_*.txt", "train/fmri/*/*/story_*.mat", "dev/story/story_*.txt",
                  "dev/fmri/*/*/story_*.mat"), folder="cogbench"),
    )
}


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
