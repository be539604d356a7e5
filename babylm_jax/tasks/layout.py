"""Where each task's files lie under `--data_dir`: our layout, or the official pipeline's.

    ours      <data_dir>/zhoblimp/, hanzi_structure/, hanzi_pinyin/, afqmc/{train,dev}.json,
              ocnli/, tnews/, cluewsc2020/, c3/, diagnostic_nli/, xcomps_zh/, cogbench/{train,dev,test}/
    official  <data_dir> = the `evaluation_data/` that the official `prepare_chinese_data.py`
              (`pipeline.py download`) writes, as it is:
              full_eval/zhoblimp/<paradigm>.jsonl, full_eval/hanzi_structure/hanzi_structure.jsonl,
              full_eval/hanzi_pinyin/hanzi_pinyin.jsonl, full_eval/clue/<task>.{train,valid}.jsonl
              (afqmc, ocnli, tnews, cluewsc2020), cogbench-fmri-0415/{train,dev,test}/

A data directory holding `full_eval/` or `cogbench-fmri-0415/` is read in the official
layout; each task's folder in it is its registry entry's `official_dir`. Tasks the official download does not hold (xcomps_zh, the hidden hanzi sets, c3,
diagnostic_nli) are looked up in our folders under the same directory in either layout.
"""
from __future__ import annotations

import pathlib

OURS = "ours"
OFFICIAL = "official"
OFFICIAL_CLUE_DIR = "full_eval/clue"  # the official CLUE tasks' files: <task>.{train,valid}.jsonl
OFFICIAL_FMRI_DIR = "cogbench-fmri-0415"
OFFICIAL_MARKERS = ("full_eval", OFFICIAL_FMRI_DIR)
OFFICIAL_SPLITS = {"train": "train", "dev": "valid"}  # our split name -> the official file's


def detect(data_dir: str | pathlib.Path) -> str:
    """OFFICIAL when `data_dir` holds full_eval/ or cogbench-fmri-0415/, else OURS."""
    data_dir = pathlib.Path(data_dir)
    return OFFICIAL if any((data_dir / m).is_dir() for m in OFFICIAL_MARKERS) else OURS


def describe(data_dir: str | pathlib.Path) -> str:
    """One line naming the layout found, for the log and the report."""
    data_dir = pathlib.Path(data_dir)
    if detect(data_dir) == OFFICIAL:
        found = ", ".join(m + "/" for m in OFFICIAL_MARKERS if (data_dir / m).is_dir())
        return f"official pipeline layout ({found} under {data_dir})"
    hint = " (the official layout is read from the folder that holds full_eval/, its parent)" \
        if data_dir.name == "full_eval" else ""
    return f"our layout (one folder per task under {data_dir}){hint}"


def task_folders(data_dir: str | pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """(task folder name, folder) of every evaluation folder under `data_dir`, in either layout, sorted.

    Our folders are `data_dir`'s subfolders; in the official layout the subfolders of
    full_eval/ are added (zhoblimp, hanzi_*, and clue, which holds several tasks' files).
    """
    data_dir = pathlib.Path(data_dir)
    folders = [(p.name, p) for p in sorted(data_dir.iterdir()) if p.is_dir()]
    if detect(data_dir) == OFFICIAL and (data_dir / "full_eval").is_dir():
        folders += [(p.name, p) for p in sorted((data_dir / "full_eval").iterdir()) if p.is_dir()]
    return folders
