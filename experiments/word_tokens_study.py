"""Words as tokens at equal compute: characters, BPE and jieba-word pieces (`data.tokenizer.kind="words"`).

    python experiments/word_tokens_study.py --data_dir ../shared/data --out runs/word_tokens
    python experiments/word_tokens_study.py --list                       # each cell's steps and TFLOP
    python experiments/word_tokens_study.py --max_tflop 0.5 --limit 40 --out /tmp/smoke   # a smoke run

Each cell is an arm (a tokenizer and vocabulary size) and a seed, trained from `--config` (base.py:
the default's model) with the number of steps that spends `--max_tflop` (STUDY_TFLOP: the 99.4 TFLOP
of the characters default the study was run against; FLOPs per token
grow with the vocabulary, so a larger vocabulary trains fewer steps), then scored on the full ZhoBLiMP
and the hanzi probe (experiments/hanzi_probe: the hanzi_structure and hanzi_pinyin stand-ins that
configs/base_hanzi.py is measured on, with the hanzi UNK rule). Train and evaluate run as subprocesses,
exactly the commands a user types. A finished cell is appended to `<out>/cells.jsonl` and skipped when
the study is run again; an interrupted cell resumes from its last checkpoint. After each cell the
summary is rewritten: `<out>/word_tokens_study.json` (per arm: mean and per-seed scores, per-paradigm
ZhoBLiMP differences from the first arm), `.md` (the tables) and `.png` (the scores by arm and seed;
the paradigms that differ most). Each cell records its wall minutes, the load average before and
after and a matmul peak measured before and after training.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from recipe_study import (  # noqa: E402  (as the recipe study resolves, counts, logs and writes)
    append_cell, loss_text, read_cells, resolved_config)

from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.core.atomic import atomic_write_text  # noqa: E402
from babylm_jax.training import metrics  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
TASKS = ("zhoblimp", "hanzi_structure", "hanzi_pinyin")
PROBE = REPO / "experiments" / "hanzi_probe"
# Every arm names its tokenizer fully, so a cell means the same whatever base.py's default.
ARMS: dict[str, dict] = {
    "char": {"data.tokenizer.kind": "char", "data.tokenizer.byte_fallback": True, "model.vocab_size": 6000},
    "bpe6k": {"data.tokenizer.kind": "bpe", "data.tokenizer.byte_fallback": True, "model.vocab_size": 6000},
    "bpe12k": {"data.tokenizer.kind": "bpe", "data.tokenizer.byte_fallback": True, "model.vocab_size": 12000},
    "words8k": {"data.tokenizer.kind": "words", "data.tokenizer.byte_fallback": True, "model.vocab_size": 8000},
    "words12k": {"data.tokenizer.kind": "words", "data.tokenizer.byte_fallback": True, "model.vocab_size": 12000},
}
DEFAULT_ARMS = "char,bpe6k,words8k,words12k"
STUDY_TFLOP = 99.4151  # every cell's compute: 4,800 steps of base.py's model over 6,000 character ids


def cell_overrides(config_file: str, arm: str, seed: int, max_tflop: float) -> tuple[dict, float]:
    """The arm's overrides plus the seed and the steps that spend `max_tflop` of training; and those TFLOP."""
    overrides = {**ARMS[arm], "train.seed": seed}
    run = RunConfig.from_config(resolved_config(config_file, overrides))
    tokens_per_step = run.train.batch_size * run.train.seq_len
    per_token = metrics.train_flops_per_token(run.model, run.train.seq_len, metrics.causal_share(run))
    steps = int(max_tflop * 1e12 // (tokens_per_step * per_token))
    if steps < 1:
        raise SystemExit(f"--max_tflop={max_tflop} buys no step of arm {arm} ({tokens_per_step * per_token / 1e12:.4f} "
                         "TFLOP a step); raise it")
    return {**overrides, "train.num_steps": steps}, steps * tokens_per_step * per_token / 1e12


def eval_data(out: pathlib.Path, data_dir: str) -> pathlib.Path:
    """`<out>/eval_data`: the real ZhoBLiMP and the hanzi probe, side by side (links)."""
    folder = out / "eval_data"
    folder.mkdir(parents=True, exist_ok=True)
    zhoblimp = pathlib.Path(data_dir) / "zhoblimp"
    if not zhoblimp.is_dir():
        raise SystemExit(f"--data_dir {data_dir}: no zhoblimp folder in it (BABYLM_DATA_DIR names the shared data)")
    for name, target in [("zhoblimp", zhoblimp.resolve())] + [(t, PROBE / t) for t in TASKS[1:]]:
        link = folder / name
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    return folder


def _matmul_peak_gflops() -> float:
    from babylm_jax.training.peaks import measure_matmul_peak  # imports jax: only when a cell runs

    return round(measure_matmul_peak(n=1024, repeats=3) / 1e9, 1)


def run_cell(arm: str, seed: int, args: argparse.Namespace, data: pathlib.Path) -> dict:
    overrides, tflop = cell_overrides(args.config, arm, seed, args.max_tflop)
    workdir = args.out / f"{arm}_seed{seed}"
    train = [sys.executable, "-m", "babylm_jax.train", "--config", args.config, "--workdir", str(workdir)]
    train += [f"--config.{k}={v}" for k, v in overrides.items()] + list(args.flags)
    evaluate = [sys.executable, "-m", "babylm_jax.evaluate", "--workdir", str(workdir), "--data_dir", str(data),
                "--tasks", ",".join(TASKS), "--output", str(workdir / "eval" / "results.json")]
    evaluate += ["--limit", str(args.limit)] if args.limit else []
    load_before, peak_before = os.getloadavg()[0], _matmul_peak_gflops()
    start = time.perf_counter()
    subprocess.run(train, check=True, cwd=REPO)
    train_minutes = (time.perf_counter() - start) / 60
    load_after, peak_after = os.getloadavg()[0], _matmul_peak_gflops()
    subprocess.run(evaluate, check=True, cwd=REPO)
    summary = json.loads((workdir / "summary.json").read_text())
    results = json.loads((workdir / "eval" / "results.json").read_text())
    details = json.loads((workdir / "eval" / "results_details.json").read_text())["tasks"]
    return {
        "arm": arm, "seed": seed, "command": " ".join(train[1:]).replace(str(args.out), "OUT"),
        "training_tflop": round(tflop, 2), "steps": overrides["train.num_steps"],
        "vocab_size": overrides["model.vocab_size"], "kind": overrides["data.tokenizer.kind"],
        "parameters": summary["parameters"], "tokens_seen": summary["tokens_seen"], "words_seen": summary["words_seen"],
        "final_eval_loss": summary["final_eval_loss"],
        **{task: results[task]["accuracy"] for task in TASKS},
        "zhoblimp_per_uid": details["zhoblimp"]["per_uid"],
        "limit": args.limit, "train_minutes": round(train_minutes, 2), "load_before": round(load_before, 2),
        "load_after": round(load_after, 2), "matmul_peak_gflops": [peak_before, peak_after],
    }


def summarize(cells: list[dict]) -> dict:
    """Per arm (in the order first met): mean and per-seed scores; per-paradigm ZhoBLiMP differences from
    the first arm (mean over its seeds), largest first."""
    arms: dict[str, list[dict]] = {}
    for cell in cells:
        arms.setdefault(cell["arm"], []).append(cell)
    reference = next(iter(arms), None)
    summary: dict = {"reference_arm": reference, "arms": {}}
    for arm, rows in arms.items():
        entry = {task: {"mean": float(np.mean([r[task] for r in rows])), "seeds": {r["seed"]: r[task] for r in rows}}
                 for task in TASKS}
        entry["tokens_per_word"] = float(np.mean([r["tokens_seen"] / max(r["words_seen"], 1) for r in rows]))
        entry["steps"], entry["training_tflop"] = rows[0]["steps"], rows[0]["training_tflop"]
        if arm != reference:
            uids = sorted(set.intersection(*(set(r["zhoblimp_per_uid"]) for r in rows + arms[reference])))
            mean_uid = lambda group: {u: float(np.mean([r["zhoblimp_per_uid"][u] for r in group])) for u in uids}  # noqa: E731
            ours, theirs = mean_uid(rows), mean_uid(arms[reference])
            entry["zhoblimp_per_uid_minus_reference"] = dict(sorted(((u, ours[u] - theirs[u]) for u in uids),
                                                                     key=lambda kv: -abs(kv[1])))
        summary["arms"][arm] = entry
    return summary


def tables(cells: list[dict], summary: dict) -> str:
    head = ("| arm | seed | vocab | steps | TFLOP | tokens/word | eval loss | ZhoBLiMP | hanzi structure | hanzi pinyin "
            "| train min | load before-after | matmul peak GFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {c['arm']} | {c['seed']} | {c['vocab_size']} | {c['steps']} | {c['training_tflop']:.1f} | "
             f"{c['tokens_seen'] / max(c['words_seen'], 1):.2f} | {loss_text(c['final_eval_loss'])} | {c['zhoblimp']:.4f} | "
             f"{c['hanzi_structure']:.4f} | {c['hanzi_pinyin']:.4f} | {c['train_minutes']:.1f} | "
             f"{c['load_before']:.1f}-{c['load_after']:.1f} | {c['matmul_peak_gflops'][0]}-{c['matmul_peak_gflops'][1]} |"
             for c in cells]
    means = ["", f"| arm | ZhoBLiMP mean (seeds) | hanzi structure | hanzi pinyin | paradigms up / down vs "
             f"{summary['reference_arm']} (> 5 points) |", "|---|---|---|---|---|"]
    for arm, entry in summary["arms"].items():
        diffs = list(entry.get("zhoblimp_per_uid_minus_reference", {}).values())
        seeds = " / ".join(f"{v:.4f}" for v in entry["zhoblimp"]["seeds"].values())
        means.append(f"| {arm} | {entry['zhoblimp']['mean']:.4f} ({seeds}) | {entry['hanzi_structure']['mean']:.4f} | "
                     f"{entry['hanzi_pinyin']['mean']:.4f} | "
                     + (f"{sum(d > 0.05 for d in diffs)} / {sum(d < -0.05 for d in diffs)}" if diffs else "-") + " |")
    return "\n".join([head, *lines, *means]) + "\n"


def figure(summary: dict, path: pathlib.Path) -> None:
    """Scores by arm (a dot per seed, a bar for the mean), and the paradigms that differ most from the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(summary["arms"])
    fig, (scores, paradigms) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / len(TASKS)
    for k, task in enumerate(TASKS):
        x = np.arange(len(arms)) + (k - (len(TASKS) - 1) / 2) * width
        scores.bar(x, [summary["arms"][a][task]["mean"] for a in arms], width, label=task, alpha=0.6)
        for xi, arm in zip(x, arms):
            seeds = list(summary["arms"][arm][task]["seeds"].values())
            scores.plot([xi] * len(seeds), seeds, "k.", markersize=4)
    scores.set(xticks=range(len(arms)), xticklabels=arms, ylabel="accuracy", ylim=(0.0, 1.0),
               title="equal compute: scores by arm (dots: seeds)")
    scores.legend(fontsize=8)
    for arm in arms[1:]:
        diffs = summary["arms"][arm]["zhoblimp_per_uid_minus_reference"]
        paradigms.plot(sorted(diffs.values()), ".-", label=arm)
    paradigms.axhline(0, color="k", linewidth=0.5)
    paradigms.set(xlabel="ZhoBLiMP paradigms, sorted", ylabel=f"accuracy minus {summary['reference_arm']}",
                  title="per-paradigm differences")
    if len(arms) > 1:
        paradigms.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def write_outputs(out: pathlib.Path, cells: list[dict]) -> None:
    summary = summarize(cells)
    atomic_write_text(out / "word_tokens_study.json", json.dumps({"cells": cells, "summary": summary}, indent=1,
                                                                  ensure_ascii=False) + "\n")
    atomic_write_text(out / "word_tokens_study.md", tables(cells, summary))
    figure(summary, out / "word_tokens_study.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated, of: {', '.join(ARMS)}; the first is "
                                                            "the reference of the per-paradigm differences")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--config", default="configs/base.py")
    parser.add_argument("--max_tflop", type=float, default=None,
                        help=f"training compute of every cell (default: {STUDY_TFLOP}, the characters default's)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/word_tokens"))
    parser.add_argument("--data_dir", default=os.environ.get("BABYLM_DATA_DIR", "../shared/data"))
    parser.add_argument("--limit", type=int, default=0, help="smoke runs only: the first N pairs of each task")
    parser.add_argument("--flag", dest="flags", action="append", default=[],
                        help="a further training flag for every cell, e.g. --flag=--config.data.max_documents=200")
    parser.add_argument("--list", action="store_true", help="print each cell's steps and TFLOP and exit")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.max_tflop is None:
        args.max_tflop = STUDY_TFLOP
    if args.list:
        for arm in arms:
            overrides, tflop = cell_overrides(args.config, arm, 0, args.max_tflop)
            print(f"{arm}: {overrides['train.num_steps']} steps, {tflop:.1f} TFLOP")
        return
    args.out = args.out.absolute()
    data = eval_data(args.out, args.data_dir)
    log = args.out / "cells.jsonl"
    cells = read_cells(log)
    for arm in arms:
        for seed in seeds:
            if any(c["arm"] == arm and c["seed"] == seed for c in cells):
                print(f"[word_tokens] {arm} seed {seed}: done already")
                continue
            cell = run_cell(arm, seed, args, data)
            cells.append(cell)
            append_cell(log, cell)
            write_outputs(args.out, cells)
            print(f"[word_tokens] {arm} seed {seed}: ZhoBLiMP {cell['zhoblimp']:.4f}, hanzi structure "
                  f"{cell['hanzi_structure']:.4f}, pinyin {cell['hanzi_pinyin']:.4f}, {cell['train_minutes']:.1f} min",
                  flush=True)
    if cells:
        print((args.out / "word_tokens_study.md").read_text())


if __name__ == "__main__":
    main()
