"""The fine-tuning side by side as tables: dev accuracy per task, per side, over the seeds compare.sh ran.

    python experiments/finetune_parity/table.py OUT

Reads OUT/official_seed<S>/<model>/main/finetune/<task>/results.txt (the official pipeline's
`accuracy: 0.xx` lines), OUT/official_seed<S>_diagnostic_nli/<model>/main/finetune/ocnli/results.txt
(diagnostic_nli through the official trainer) and OUT/ours_seed<S>/results.json
(`{"afqmc": {"accuracy": ...}, ...}`); writes OUT/parity.json and prints one markdown table per task
(per side: mean, standard deviation with ddof 1 and the values per seed; the difference of the
means, ours - official; the pooled standard deviation; whether |difference| <= max(0.01, pooled
std)) and a summary table. c3 has no official code at 2c8a2d9: ours only.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import sys

TASKS = ("afqmc", "ocnli", "tnews", "cluewsc2020", "c3", "diagnostic_nli")
TOLERANCE = 0.01  # one point of accuracy
NO_OFFICIAL = {"c3": "no official code at 2c8a2d9 (ours only)"}


def official_accuracy(path: pathlib.Path) -> float | None:
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "accuracy":
            score = float(value)
            return score / 100 if score > 1 else score
    return None


def one_result(pattern_root: pathlib.Path, task_dir: str) -> float | None:
    found = sorted(pattern_root.glob(f"*/main/finetune/{task_dir}/results.txt"))
    if len(found) > 1:
        raise ValueError(f"{pattern_root}: results of several models: {[str(p) for p in found]}")
    return official_accuracy(found[0]) if found else None


def seeds_of(out: pathlib.Path) -> list[int]:
    seeds = set()
    for path in out.iterdir():
        match = re.fullmatch(r"(?:official|ours|config)_seed(\d+)(?:_diagnostic_nli|\.yaml|\.ours\.yaml)?", path.name)
        if match:
            seeds.add(int(match.group(1)))
    return sorted(seeds)


def collect(out: pathlib.Path) -> tuple[list[int], dict[str, dict[str, dict[int, float]]]]:
    """seeds, and task -> side -> seed -> accuracy (0-1) of every result found."""
    seeds = seeds_of(out)
    scores: dict[str, dict[str, dict[int, float]]] = {t: {"official": {}, "ours": {}} for t in TASKS}
    for seed in seeds:
        for task in TASKS:
            if task in NO_OFFICIAL:
                continue
            if task == "diagnostic_nli":
                value = one_result(out / f"official_seed{seed}_diagnostic_nli", "ocnli")
            else:
                value = one_result(out / f"official_seed{seed}", task)
            if value is not None:
                scores[task]["official"][seed] = value
        ours = out / f"ours_seed{seed}" / "results.json"
        if ours.is_file():
            results = json.loads(ours.read_text(encoding="utf-8"))
            for task in TASKS:
                value = (results.get(task) or {}).get("accuracy")
                if value is not None:
                    scores[task]["ours"][seed] = float(value)
    return seeds, scores


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def pooled_std(a: list[float], b: list[float]) -> float | None:
    if len(a) + len(b) < 3 or len(a) < 1 or len(b) < 1:
        return None
    squares = sum((v - sum(a) / len(a)) ** 2 for v in a) + sum((v - sum(b) / len(b)) ** 2 for v in b)
    return math.sqrt(squares / (len(a) + len(b) - 2))


def compare(sides: dict[str, dict[int, float]]) -> dict:
    entry: dict = {}
    for side, by_seed in sides.items():
        mean, std = mean_std(list(by_seed.values()))
        entry[side] = {"n": len(by_seed), "mean": mean, "std": std, "values": {str(s): v for s, v in by_seed.items()}}
    a, b = list(sides["official"].values()), list(sides["ours"].values())
    if a and b:
        diff = entry["ours"]["mean"] - entry["official"]["mean"]
        pooled = pooled_std(a, b)
        tolerance = max(TOLERANCE, pooled) if pooled is not None else TOLERANCE
        entry.update(diff=diff, pooled_std=pooled, tolerance=tolerance, agree=abs(diff) <= tolerance)
    return entry


def fmt(value: float | None, digits: int = 4, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def markdown(seeds: list[int], table: dict[str, dict]) -> str:
    lines = []
    for task, entry in table.items():
        lines += [f"### {task}", "", f"| side | n | mean | std | {' | '.join(f'seed {s}' for s in seeds)} |",
                  "| --- | ---: | ---: | ---: |" + " ---: |" * len(seeds)]
        for side in ("official", "ours"):
            values = entry[side]["values"]
            if side == "official" and task in NO_OFFICIAL:
                lines.append(f"| official | - | {NO_OFFICIAL[task]} | | " + " | ".join("-" for _ in seeds) + " |")
                continue
            lines.append(f"| {side} | {entry[side]['n']} | {fmt(entry[side]['mean'])} | {fmt(entry[side]['std'])} | "
                         + " | ".join(fmt(values.get(str(s))) for s in seeds) + " |")
        if "diff" in entry:
            lines.append(f"\nours - official {fmt(entry['diff'], sign=True)}, pooled std {fmt(entry['pooled_std'])}: "
                         f"{'within' if entry['agree'] else 'NOT within'} max({TOLERANCE}, pooled std) = "
                         f"{fmt(entry['tolerance'])}")
        lines.append("")
    lines += ["### summary", "", "| task | official mean ± std | ours mean ± std | ours - official | pooled std | agree |",
              "| --- | ---: | ---: | ---: | ---: | :---: |"]
    for task, entry in table.items():
        cells = []
        for side in ("official", "ours"):
            e = entry[side]
            cells.append("-" if e["mean"] is None else f"{fmt(e['mean'])} ± {fmt(e['std'])} (n={e['n']})")
        agree = {True: "yes", False: "NO"}.get(entry.get("agree"), "-")
        lines.append(f"| {task} | {cells[0]} | {cells[1]} | {fmt(entry.get('diff'), sign=True)} | "
                     f"{fmt(entry.get('pooled_std'))} | {agree} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = pathlib.Path(argv[1])
    seeds, scores = collect(out)
    if not seeds:
        print(f"{out}: no official_seed*/ours_seed*/config_seed* entries", file=sys.stderr)
        return 1
    table = {task: compare(sides) for task, sides in scores.items()}
    report = {"seeds": seeds, "tolerance": f"max({TOLERANCE}, pooled std)", "metric": "dev accuracy (0-1)",
              "notes": NO_OFFICIAL, "tasks": table}
    (out / "parity.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(markdown(seeds, table))
    print(f"\nwrote {out / 'parity.json'}")
    missing = [f"{task} {side}" for task, entry in table.items() for side in ("official", "ours")
               if entry[side]["n"] < len(seeds) and not (side == "official" and task in NO_OFFICIAL)]
    if missing:
        print(f"missing results ({len(seeds)} seeds expected): {', '.join(missing)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
