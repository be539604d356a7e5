"""The recipe study: train a row of configs within a compute budget, score each on full ZhoBLiMP.

    python experiments/recipe_study.py --data_dir ../shared/data --out runs/study --rows char_lr3e-3_1200,...
    python experiments/recipe_study.py --list

Every row is `python -m babylm_jax.train --config FILE --config.k=v ...` then
`python -m babylm_jax.evaluate ... --tasks zhoblimp` (all 35,400 pairs), run as
subprocesses exactly as a user would. The budget is compute, not wall time (shared
machines vary 5x with load): training FLOPs = tokens x `training.metrics.train_flops_per_token`,
checked before a row starts. Each finished row is appended to `<out>/study.jsonl` (rerunning
skips it) and the table is rewritten to `<out>/study.md`, with the wall minutes and the
load average around the run.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from babylm_jax.core.atomic import atomic_write_text
from babylm_jax.config.files import load_config_file
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import AUX_HEADS
from babylm_jax.training import metrics

BASE = "configs/base.py"
MLM = "configs/base_mlm.py"
HYBRID = "configs/base_hybrid.py"
# Tokenizers and their 6,000 ids named in every row, so a row's command means the same whatever
# base.py's default (its jieba words and 8,000 ids came after this study).
CHAR = {"data.tokenizer.kind": "char", "data.tokenizer.byte_fallback": True, "model.vocab_size": 6000}
BPE = {"data.tokenizer.kind": "bpe", "model.vocab_size": 6000}
UNIGRAM = {"data.tokenizer.kind": "unigram", "model.vocab_size": 6000}

# name -> (config file, overrides). Budget per row: --max_tflop (100 by default).
ROWS: dict[str, tuple[str, dict]] = {
    "bpe6k_lr3e-3_1200": (BASE, {**BPE, "train.num_steps": 1200}),
    "bpe3k_lr3e-3_1200": (BASE, {**BPE, "train.num_steps": 1200, "model.vocab_size": 3000}),
    "unigram6k_lr3e-3_1200": (BASE, {**UNIGRAM, "train.num_steps": 1200}),
    "char_lr3e-3_1200": (BASE, {**CHAR, "train.num_steps": 1200}),
    "char_lr3e-3_1200_seed1": (BASE, {**CHAR, "train.num_steps": 1200, "train.seed": 1}),
    "char_lr1e-2_1200": (BASE, {**CHAR, "train.num_steps": 1200, "train.learning_rate": 1e-2}),
    "char_lr1e-3_1200": (BASE, {**CHAR, "train.num_steps": 1200, "train.learning_rate": 1e-3}),
    "char_warmup300_1200": (BASE, {**CHAR, "train.num_steps": 1200, "train.warmup_steps": 300}),
    "char_d192_1200": (BASE, {**CHAR, "train.num_steps": 1200, "model.d_model": 192, "model.num_heads": 4,
                              "model.d_ff": 512}),
    "char_l6_1200": (BASE, {**CHAR, "train.num_steps": 1200, "model.num_layers": 6}),
    "char_seq256_b8_1200": (BASE, {**CHAR, "train.num_steps": 1200, "train.seq_len": 256, "train.batch_size": 8}),
    "char_b32_600": (BASE, {**CHAR, "train.num_steps": 600, "train.batch_size": 32}),
    "mlm_char_1200": (MLM, {**CHAR, "train.num_steps": 1200}),
    "hybrid_char_1200": (HYBRID, {**CHAR, "train.num_steps": 1200}),
    "char_lr3e-3_4800": (BASE, {**CHAR, "train.num_steps": 4800}),
    "char_lr3e-3_4800_seed1": (BASE, {**CHAR, "train.num_steps": 4800, "train.seed": 1}),
    "bpe6k_lr3e-3_4800": (BASE, {**BPE, "train.num_steps": 4800}),
    "hybrid_char_4500": (HYBRID, {**CHAR, "train.num_steps": 4500}),
}


def resolved_config(config_file: str, overrides: dict):
    config = load_config_file(pathlib.Path(config_file))
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for name in parents:
            node = node[name]
        node[leaf] = value
    return config


def planned_tflop(config) -> float:
    """Training FLOPs of the whole run, from the config alone (before any work)."""
    run = RunConfig.from_config(config)
    tokens = run.train.num_steps * run.train.batch_size * run.train.seq_len
    per_token = metrics.train_flops_per_token(run.model, run.train.seq_len, metrics.causal_share(run))
    return tokens * per_token / 1e12


def commands(name: str, config_file: str, overrides: dict, out: pathlib.Path, data_dir: str) -> list[list[str]]:
    workdir = out / name
    train = [sys.executable, "-m", "babylm_jax.train", "--config", config_file, "--workdir", str(workdir)]
    train += [f"--config.{k}={v}" for k, v in overrides.items()]
    evaluate = [sys.executable, "-m", "babylm_jax.evaluate", "--workdir", str(workdir), "--data_dir", data_dir,
                "--tasks", "zhoblimp", "--output", str(workdir / "eval" / "results.json")]
    return [train, evaluate]


def run_row(name: str, out: pathlib.Path, data_dir: str, max_tflop: float) -> dict:
    config_file, overrides = ROWS[name]
    config = resolved_config(config_file, overrides)
    tflop = planned_tflop(config)
    if tflop > max_tflop:
        raise SystemExit(f"row {name}: {tflop:.1f} TFLOP of training is over --max_tflop={max_tflop}")
    train_cmd, eval_cmd = commands(name, config_file, overrides, out, data_dir)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(train_cmd, check=True)
    train_minutes = (time.perf_counter() - start) / 60
    load_after = os.getloadavg()[0]
    subprocess.run(eval_cmd, check=True)
    workdir = out / name
    summary = json.loads((workdir / "summary.json").read_text())
    results = json.loads((workdir / "eval" / "results.json").read_text())
    budget = json.loads((workdir / "budget.json").read_text())
    return {
        "name": name,
        "command": " ".join(train_cmd[1:]).replace(str(out), "runs/study"),
        "training_tflop": round(tflop, 2),
        "corpus_words": budget["words"],
        "words_seen": summary["words_seen"],
        "tokens_seen": summary["tokens_seen"],
        "parameters": summary["parameters"],
        "final_eval_loss": summary["final_eval_loss"],
        "zhoblimp": results["zhoblimp"]["accuracy"],
        "train_minutes": round(train_minutes, 2),
        "load_before": load_before,
        "load_after": load_after,
    }


def base_hanzi_heads() -> dict[str, float]:
    """configs/base_hanzi.py's auxiliary heads: name -> loss weight, the weighted ones."""
    heads = load_config_file(pathlib.Path(__file__).resolve().parents[1] / "configs" / "base_hanzi.py").train.aux_heads
    return {head: heads[head] for head in AUX_HEADS if heads[head] > 0}


def read_cells(log: pathlib.Path) -> list[dict]:
    """The finished cells of a study's `cells.jsonl` (none before the first)."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def append_cell(log: pathlib.Path, cell: dict) -> None:
    with log.open("a", encoding="utf-8") as f:
        f.write(json.dumps(cell, ensure_ascii=False) + "\n")


def loss_text(value: float | None) -> str:
    """An eval loss for a table: "none" for a run that held no text out (summary.json's null)."""
    return "none" if value is None else f"{value:.3f}"


def table(rows: list[dict]) -> str:
    head = "| row | TFLOP | params | words seen | eval loss | ZhoBLiMP | wall min (load) | command |\n|---|---|---|---|---|---|---|---|"
    lines = [
        f"| {r['name']} | {r['training_tflop']:.1f} | {r['parameters'] / 1e6:.2f}M | {r['words_seen'] / 1e6:.2f}M | "
        f"{loss_text(r['final_eval_loss'])} | {r['zhoblimp']:.4f} | {r['train_minutes']:.1f} "
        f"({r['load_before']:.1f}-{r['load_after']:.1f}) | `{r['command']}` |"
        for r in rows
    ]
    return "\n".join([head, *lines]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="", help="comma-separated row names (see --list)")
    parser.add_argument("--out", default="runs/study")
    parser.add_argument("--data_dir", default=os.environ.get("BABYLM_DATA_DIR", "../shared/data"))
    parser.add_argument("--max_tflop", type=float, default=100.0)
    parser.add_argument("--list", action="store_true", help="print each row's planned TFLOP and exit")
    args = parser.parse_args()
    if args.list:
        for name, (config_file, overrides) in ROWS.items():
            print(f"{name}: {planned_tflop(resolved_config(config_file, overrides)):.1f} TFLOP")
        return
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "study.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    unknown = [n for n in args.rows.split(",") if n and n not in ROWS]
    if unknown:
        raise SystemExit(f"--rows: unknown row(s) {unknown}; known: {', '.join(ROWS)}")
    for name in [n for n in args.rows.split(",") if n]:
        if any(r["name"] == name for r in done):
            print(f"[study] {name}: done already")
            continue
        row = run_row(name, out, args.data_dir, args.max_tflop)
        done.append(row)
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        atomic_write_text(out / "study.md", table(done))
        print(f"[study] {name}: ZhoBLiMP {row['zhoblimp']:.4f}, eval loss {loss_text(row['final_eval_loss'])}, "
              f"{row['training_tflop']:.1f} TFLOP, {row['train_minutes']:.1f} min", flush=True)
    print(table(done))


if __name__ == "__main__":
    main()
