"""The hanzi track in the default: configs/base.py with and without character facts and heads, two seeds.

    python experiments/hanzi_recipe_study.py --out runs/hanzi_recipe          # 4 cells, each ~1 hour on 2 Zen 1 cores
    python experiments/hanzi_recipe_study.py --out /tmp/smoke --limit 40 \
        --flag=--config.train.num_steps=20                                 # the whole path, in minutes

Each cell is an arm and a seed, trained from `--config` at the same compute (`--max_tflop`, base.py's 99.4
TFLOP: 4,167 steps; the heads add 11% to base.py's FLOPs a token, so the `hanzi` arm trains 3,745 steps;
`--list` prints them) with exactly the commands a user types, then scored with
`evaluate --tasks all --config.finetune.protocol=quick`: the full ZhoBLiMP, the open hanzi probes
(experiments/hanzi_probe, standing in for hanzi_structure / hanzi_pinyin), the six fine-tuned tasks
at the quick protocol (afqmc, cluewsc2020 and ZhoBLiMP from `--data_dir`; ocnli and tnews as CLUE's full
splits from `--clue_full`; c3 and diagnostic_nli as experiments/finetune_parity/make_data.py's
fixtures) and synthetic fMRI (tools.fmri_synth, seed 0). `prepare --data_dir` writes each cell's
leakage.json and unk_audit.json. Arms:

- `base`: base.py as it ships (no facts, no heads);
- `hanzi`: base.py plus `data.hanzi_facts` (share ARM_SHARE of the 102M budget: 816,000 jieba words about
  the 1,000 most frequent hanzi, beside the 2.69M-word builtin corpus) and configs/base_hanzi.py's heads.

Training runs in pieces of at most `--run_minutes` (19): a piece still training then is stopped with
SIGTERM (it saves its step, exit 143) and the same command resumes it, on the same trajectory.
A finished cell is appended to `<out>/cells.jsonl` and skipped when the study is run again; an
interrupted cell resumes from its checkpoint. After each cell `<out>/hanzi_recipe_study.json` and
`.md` are rewritten: per cell the scores, the load and the train minutes; per arm the means over its
seeds and the 14-task row the project computes (`evaluate --gather`'s mean over the tasks a run has).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from recipe_study import (  # noqa: E402  (as the recipe study resolves, logs and writes)
    append_cell, base_hanzi_heads, loss_text, read_cells, resolved_config)

from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.core.atomic import atomic_write_text  # noqa: E402
from babylm_jax.eval import gather  # noqa: E402
from babylm_jax.training import metrics  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
PROBE = REPO / "experiments" / "hanzi_probe"
ARM_SHARE = 0.008  # of data.word_budget (102M): 816,000 words, 30% of the builtin corpus (base_hanzi.py's 807,275)
HEADS = base_hanzi_heads()
ARMS: dict[str, dict] = {
    "base": {},
    "hanzi": {"data.hanzi_facts.share": ARM_SHARE, "data.hanzi_facts.characters": 1000,
              **{f"train.aux_heads.{head}": weight for head, weight in HEADS.items()}},
}
STUDY_TFLOP = 99.4151  # base.py's compute: 4,167 steps over 8,000 jieba-word ids (experiments/README.md)
SHOWN = ("zhoblimp", "hanzi_structure", "hanzi_pinyin", "afqmc", "ocnli", "tnews", "cluewsc2020", "c3",
         "diagnostic_nli", "fmri", "word_fmri")


def _link(link: pathlib.Path, target: pathlib.Path) -> None:
    if not target.exists():
        raise SystemExit(f"{target} is missing: see --data_dir, --clue_full")
    if not link.is_symlink():
        link.symlink_to(target.resolve(), target_is_directory=True)


def eval_data(out: pathlib.Path, data_dir: pathlib.Path, clue_full: pathlib.Path) -> pathlib.Path:
    """`<out>/eval_data`: every task's folder side by side (links; the fixtures and fMRI made once under <out>)."""
    folder = out / "eval_data"
    folder.mkdir(parents=True, exist_ok=True)
    fixtures, fmri = out / "finetune_fixtures", out / "fmri_synth"
    if not (fixtures / "c3").is_dir():
        subprocess.run([sys.executable, str(REPO / "experiments/finetune_parity/make_data.py"), str(fixtures),
                        "--train_examples", "3000", "--shared", str(clue_full.parent)], check=True, cwd=REPO)
    if not (fmri / "cogbench").is_dir():
        subprocess.run([sys.executable, "-m", "babylm_jax.tools.fmri_synth", f"--out={fmri}", "--seed=0"],
                       check=True, cwd=REPO)
    links = {"zhoblimp": data_dir / "zhoblimp", "afqmc": data_dir / "afqmc", "cluewsc2020": data_dir / "cluewsc2020",
             "ocnli": clue_full / "ocnli", "tnews": clue_full / "tnews", "c3": fixtures / "c3",
             "diagnostic_nli": fixtures / "diagnostic_nli", "cogbench": fmri / "cogbench",
             "hanzi_structure": PROBE / "hanzi_structure", "hanzi_pinyin": PROBE / "hanzi_pinyin"}
    for name, target in links.items():
        _link(folder / name, target)
    return folder


def _accuracies(results: dict) -> dict[str, float]:
    """task -> its leaderboard value (the metric `evaluate --gather` shows)."""
    header, [row] = gather.table({"cell": results})
    return {task: value for task, value in zip(header[1:-2], row[1:-2]) if value is not None}


def flops_per_token(run: RunConfig) -> float:
    """A training token's FLOPs: the model's and the heads' (training.metrics)."""
    model = metrics.train_flops_per_token(run.model, run.train.seq_len, metrics.causal_share(run))
    return model + metrics.aux_heads_flops_per_token(run.model.d_model, run.train.aux_heads)


def cell_overrides(config_file: str, arm: str, seed: int, max_tflop: float) -> tuple[dict, float]:
    """The arm's overrides, the seed and the steps that spend `max_tflop`; and those TFLOP."""
    overrides = {**ARMS[arm], "train.seed": seed}
    run = RunConfig.from_config(resolved_config(config_file, overrides))
    per_step = run.train.batch_size * run.train.seq_len * flops_per_token(run)
    steps = int(max_tflop * 1e12 // per_step)
    if steps < 1:
        raise SystemExit(f"--max_tflop={max_tflop} buys no step of arm {arm} ({per_step / 1e12:.4f} TFLOP a step)")
    return {**overrides, "train.num_steps": steps}, steps * per_step / 1e12


def train_in_pieces(command: list[str], minutes: float) -> int:
    """Runs `command` (a train) to its end in pieces of at most `minutes`; returns how many pieces it took."""
    pieces = 0
    while True:
        pieces += 1
        process = subprocess.Popen(command, cwd=REPO)
        try:
            status = process.wait(timeout=minutes * 60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)  # the step finishes and is checkpointed; the next piece resumes
            status = process.wait()
            if status == 128 + signal.SIGTERM:
                print(f"[hanzi_recipe] train stopped after {minutes:g} minutes, resuming", flush=True)
                continue
        if status != 0:
            raise subprocess.CalledProcessError(status, command)
        return pieces


def run_cell(arm: str, seed: int, args: argparse.Namespace, data: pathlib.Path) -> dict:
    workdir = args.out / f"{arm}_seed{seed}"
    overrides, tflop = cell_overrides(args.config, arm, seed, args.max_tflop)
    flags = [f"--config.{k}={v}" for k, v in overrides.items()] + list(args.flags)
    config = ["--config", args.config, "--workdir", str(workdir)]
    results_path = workdir / "eval_quick" / "results.json"
    evaluate = [sys.executable, "-m", "babylm_jax.evaluate", "--workdir", str(workdir), "--data_dir", str(data),
                "--tasks", "all", "--config.finetune.protocol=quick", "--output", str(results_path)]
    evaluate += ["--limit", str(args.limit)] if args.limit else []
    load_before, start = os.getloadavg()[0], time.perf_counter()
    pieces = train_in_pieces([sys.executable, "-m", "babylm_jax.train", *config, *flags], args.run_minutes)
    train_minutes, load_after = (time.perf_counter() - start) / 60, os.getloadavg()[0]
    with open(workdir / "prepare_report.txt", "w", encoding="utf-8") as report:  # leakage.json, unk_audit.json
        subprocess.run([sys.executable, "-m", "babylm_jax.prepare", *config, "--data_dir", str(data), *flags],
                       check=True, cwd=REPO, stdout=report)
    subprocess.run(evaluate, check=True, cwd=REPO)
    summary = json.loads((workdir / "summary.json").read_text())
    budget = json.loads((workdir / "budget.json").read_text())
    leaks = json.loads((workdir / "leakage.json").read_text())["tasks"]
    scores = _accuracies(gather.read_checked_results(results_path))
    return {
        "arm": arm, "seed": seed, "flags": " ".join(flags), "steps": summary["steps"], "training_tflop": round(tflop, 2),
        "words": budget["words"], "fact_words": budget["sources"].get("hanzi_facts", {}).get("words", 0),
        "final_eval_loss": summary["final_eval_loss"], "scores": scores,
        "row_mean": float(np.mean(list(scores.values()))), "tasks": len(scores),
        "hanzi_probe_items_leaked": sum(leaks.get(t, {}).get("leaked", 0) for t in ("hanzi_structure", "hanzi_pinyin")),
        "limit": args.limit, "train_minutes": round(train_minutes, 2), "train_pieces": pieces,
        "load_before": round(load_before, 2), "load_after": round(load_after, 2),
    }


def summarize(cells: list[dict]) -> dict:
    """Per arm: each task's mean over its seeds and the seeds' values; the mean row's mean and spread."""
    arms: dict[str, list[dict]] = {}
    for cell in cells:
        arms.setdefault(cell["arm"], []).append(cell)
    out = {}
    for arm, rows in arms.items():
        tasks = sorted(set.intersection(*(set(r["scores"]) for r in rows)))
        out[arm] = {"seeds": [r["seed"] for r in rows],
                    "tasks": {t: {"mean": float(np.mean([r["scores"][t] for r in rows])),
                                  "seeds": [r["scores"][t] for r in rows]} for t in tasks},
                    "row_mean": float(np.mean([r["row_mean"] for r in rows])),
                    "row_mean_seeds": [r["row_mean"] for r in rows]}
    return out


def tables(cells: list[dict], summary: dict) -> str:
    shown = [t for t in SHOWN if any(t in c["scores"] for c in cells)]
    head = ["arm", "seed", "steps", "TFLOP", "fact words", *shown, "mean (tasks)", "eval loss", "probe leaked",
            "train min", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        values = [f"{c['scores'][t]:.4f}" if t in c["scores"] else "-" for t in shown]
        lines.append(f"| {c['arm']} | {c['seed']} | {c['steps']:,} | {c['training_tflop']:.1f} | {c['fact_words']:,} | " + " | ".join(values)
                     + f" | {c['row_mean']:.4f} ({c['tasks']}) | {loss_text(c['final_eval_loss'])} | "
                     f"{c['hanzi_probe_items_leaked']} | {c['train_minutes']:.1f} | {c['load_before']:.1f}-"
                     f"{c['load_after']:.1f} |")
    means = ["", "| arm | seeds | " + " | ".join(shown) + " | mean row (seeds) |", "|" + " --- |" * (len(shown) + 3)]
    for arm, entry in summary.items():
        values = [f"{entry['tasks'][t]['mean']:.4f}" if t in entry["tasks"] else "-" for t in shown]
        seeds = " / ".join(f"{v:.4f}" for v in entry["row_mean_seeds"])
        means.append(f"| {arm} | {len(entry['seeds'])} | " + " | ".join(values) + f" | {entry['row_mean']:.4f} ({seeds}) |")
    return "\n".join(lines + means) + "\n"


def write_outputs(out: pathlib.Path, cells: list[dict]) -> None:
    summary = summarize(cells)
    atomic_write_text(out / "hanzi_recipe_study.json",
                      json.dumps({"cells": cells, "arms": summary}, indent=1, ensure_ascii=False) + "\n")
    atomic_write_text(out / "hanzi_recipe_study.md", tables(cells, summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of: {', '.join(ARMS)}")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--config", default="configs/base.py")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/hanzi_recipe"))
    parser.add_argument("--data_dir", type=pathlib.Path,
                        default=pathlib.Path(os.environ.get("BABYLM_DATA_DIR", "../shared/data")))
    parser.add_argument("--clue_full", type=pathlib.Path, default=None,
                        help="CLUE's full ocnli and tnews (default: clue_full beside --data_dir)")
    parser.add_argument("--max_tflop", type=float, default=STUDY_TFLOP, help="training compute of every cell")
    parser.add_argument("--limit", type=int, default=0, help="smoke runs only: the first N items of each task")
    parser.add_argument("--run_minutes", type=float, default=19.0,
                        help="stop a train after this long and resume it (a cell's training in pieces)")
    parser.add_argument("--list", action="store_true", help="print each arm's steps and TFLOP and exit")
    parser.add_argument("--flag", dest="flags", action="append", default=[],
                        help="a further training flag for every cell, e.g. --flag=--config.train.num_steps=20")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := [a for a in arms if a not in ARMS]:
        raise SystemExit(f"--arms: unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    if args.list:
        for arm in arms:
            overrides, tflop = cell_overrides(args.config, arm, 0, args.max_tflop)
            print(f"{arm}: {overrides['train.num_steps']:,} steps, {tflop:.1f} TFLOP")
        return
    args.out = args.out.absolute()
    data = eval_data(args.out, args.data_dir.absolute(), (args.clue_full or args.data_dir.parent / "clue_full").absolute())
    log = args.out / "cells.jsonl"
    cells = read_cells(log)
    for seed in (int(s) for s in args.seeds.split(",") if s):  # both arms of a seed first: a pair as early as can be
        for arm in arms:
            if any(c["arm"] == arm and c["seed"] == seed for c in cells):
                print(f"[hanzi_recipe] {arm} seed {seed}: done already")
                continue
            cell = run_cell(arm, seed, args, data)
            cells.append(cell)
            append_cell(log, cell)
            write_outputs(args.out, cells)
            print(f"[hanzi_recipe] {arm} seed {seed}: " + ", ".join(f"{t} {cell['scores'][t]:.4f}" for t in SHOWN[:3]
                                                                    if t in cell["scores"]), flush=True)
    if cells:
        print((args.out / "hanzi_recipe_study.md").read_text())


if __name__ == "__main__":
    main()
