"""The figures of h200_speed.sh's parts into summary.json and table.md (run by that script).

    python h200_speed_report.py record SUMMARY PART KEY VALUE      # one field; VALUE is JSON or text
    python h200_speed_report.py moved SUMMARY WORKDIR TRAIN_LOG    # part d: recounted?, tokens/s
    python h200_speed_report.py pipelines SUMMARY OUT_JSON WORK LOG [TORCH]   # part c: both sides' rates
    python h200_speed_report.py finish SUMMARY OUT WORK            # parts a, b, e: tables; table.md

Plain python (no jax): it runs with whatever python3 the machine has, also after a part failed.
"""
from __future__ import annotations

import json
import pathlib
import re
import statistics
import sys
from typing import Any

# The official protocol's four fine-tuning tasks (pipeline.py at 2c8a2d9: 10 epochs, cluewsc2020 30)
# and their split sizes (experiments/finetune_parity/make_data.py: train / dev).
OFFICIAL_PROTOCOL = {"afqmc": (34_334, 4_316, 10), "ocnli": (50_437, 2_950, 10), "tnews": (53_360, 10_000, 10),
                     "cluewsc2020": (1_244, 304, 30)}
RECOUNT = re.compile(r"count words")
STEPS_PER_S = re.compile(r"\[finetune\] (\w+): ([\d.]+) steps/s over steps")
DEV_EVAL = re.compile(r"\[finetune\] (\w+): dev evaluation ([\d.]+) s")
COMPILED = re.compile(r"\[finetune\] (\w+): compiled the train step .* in ([\d.]+) s")


def load(path: pathlib.Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def write(path: pathlib.Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False))
    tmp.replace(path)


def update(summary: pathlib.Path, part: str, fields: dict[str, Any]) -> None:
    s = load(summary, {})
    s.setdefault(part, {}).update(fields)
    write(summary, s)


def recount_lines(log: str) -> list[str]:
    """The lines of a train log that say it counted the corpus's words (a recount of a prepared run)."""
    return [line.strip() for line in re.split(r"[\r\n]", log) if RECOUNT.search(line)]


def moved_figures(workdir: pathlib.Path, log: str) -> dict[str, Any]:
    lines = recount_lines(log)
    figures: dict[str, Any] = {"recounted": bool(lines), "recount_lines": len(lines), "first_recount_line": lines[:1],
                               "checkpoints": sorted(p.name for p in (workdir / "checkpoints").glob("*")
                                                     if p.name.isdigit()) if (workdir / "checkpoints").is_dir() else []}
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
            if line.strip()] if (workdir / "metrics.jsonl").is_file() else []
    train = [r for r in rows if "tokens_per_s" in r][1:]  # the first logged interval holds the compile
    if train:
        figures.update(median_tokens_per_s=statistics.median(r["tokens_per_s"] for r in train),
                       median_mfu=statistics.median(r.get("mfu", 0.0) for r in train), final_loss=train[-1].get("loss"))
    return figures


def finetune_rates_from_log(log: str, task: str, num_dev: int, batch_size: int) -> dict[str, float]:
    """Ours: training examples/s from the '[finetune] T: S steps/s' line, evaluation examples/s from
    'dev evaluation X s', the compile seconds; each only when the log has its line."""
    rates: dict[str, float] = {}
    for pattern, key in ((STEPS_PER_S, "steps_per_s"), (DEV_EVAL, "dev_eval_s"), (COMPILED, "compile_s")):
        found = [float(m.group(2)) for m in pattern.finditer(log) if m.group(1) == task]
        if found:
            rates[key] = found[0]
    if "steps_per_s" in rates:
        rates["train_examples_per_s"] = rates["steps_per_s"] * batch_size
    if rates.get("dev_eval_s"):
        rates["eval_examples_per_s"] = num_dev / rates["dev_eval_s"]
    return rates


def full_protocol_seconds(train_per_s: float, eval_per_s: float, per_task_overhead_s: float,
                          evaluations_after: int) -> float:
    """The four official tasks at the official protocol: every epoch trains on the whole split and
    evaluates the dev split; `evaluations_after` more dev passes at the end (the official trainer's
    best-model evaluation and its prediction: 2; ours: 0); plus a fixed cost per task."""
    total = 0.0
    for train, dev, epochs in OFFICIAL_PROTOCOL.values():
        total += epochs * (train / train_per_s + dev / eval_per_s) + evaluations_after * dev / eval_per_s
        total += per_task_overhead_s
    return total


def pipelines(summary: pathlib.Path, out: pathlib.Path, work: pathlib.Path, log: str, torch: str) -> dict[str, Any]:
    official_zs, official_ft = load(work / "official_zhoblimp.json"), load(work / "official_afqmc.json")
    ours = (load(work / "ours_eval" / "results_details.json") or {}).get("tasks", {})
    raw = {"official_zhoblimp": official_zs, "official_afqmc": official_ft, "ours": ours}
    write(out, raw)
    fig: dict[str, Any] = {}
    if not torch:
        fig["official"] = "skipped: no torch"
    zs = ours.get("zhoblimp")
    if zs:
        fig["ours_zhoblimp_pairs"] = zs["num_items"]
        fig["ours_zhoblimp_pairs_per_s"] = round(zs["num_items"] / max(zs["seconds"], 1e-9), 1)  # compile included
        fig["ours_zhoblimp_accuracy"] = zs.get("accuracy")
    if official_zs:
        fig["official_zhoblimp_pairs"] = official_zs["pairs"]
        fig["official_zhoblimp_pairs_per_s"] = round(
            official_zs["pairs"] / (official_zs["seconds"]["data"] + official_zs["seconds"]["scoring"]), 1)
        fig["official_zhoblimp_accuracy"] = official_zs["accuracy_macro_uid"]
        if zs:
            fig["zhoblimp_ours_over_official"] = round(fig["ours_zhoblimp_pairs_per_s"] / fig["official_zhoblimp_pairs_per_s"], 2)
    ft = ours.get("afqmc")
    if ft:
        batch = ft.get("options", {}).get("batch_size", 32)
        rates = finetune_rates_from_log(log, "afqmc", ft["num_items"], batch)
        epochs = len(ft.get("dev_accuracy_per_epoch") or [1])
        training_s = ft.get("seconds", 0) - rates.get("compile_s", 0) - epochs * rates.get("dev_eval_s", 0)
        if "train_examples_per_s" not in rates and training_s > 0:  # too few steps for the log's rate line
            rates["train_examples_per_s_from_wall"] = ft["num_train"] * epochs / training_s
            rates["train_examples_per_s"] = rates["train_examples_per_s_from_wall"]
        fig["ours_afqmc"] = {**{k: round(v, 2) for k, v in rates.items()}, "seconds": ft.get("seconds"),
                             "num_train": ft.get("num_train"), "num_dev": ft["num_items"],
                             "dev_accuracy_per_epoch": ft.get("dev_accuracy_per_epoch")}
        if "train_examples_per_s" in rates and "eval_examples_per_s" in rates:
            fig["ours_full_protocol_hours"] = round(full_protocol_seconds(
                rates["train_examples_per_s"], rates["eval_examples_per_s"], rates.get("compile_s", 0.0), 0) / 3600, 3)
    if official_ft:
        fig["official_afqmc"] = {k: official_ft[k] for k in ("train_examples_per_s", "eval_examples_per_s", "setup_s",
                                                             "examples", "seconds_total", "results")}
        fig["official_full_protocol_hours"] = round(full_protocol_seconds(
            official_ft["train_examples_per_s"], official_ft["eval_examples_per_s"], official_ft["setup_s"], 2) / 3600, 3)
    if "ours_full_protocol_hours" in fig and "official_full_protocol_hours" in fig:
        fig["afqmc_train_ours_over_official"] = round(
            fig["ours_afqmc"]["train_examples_per_s"] / fig["official_afqmc"]["train_examples_per_s"], 2)
        fig["full_protocol_official_over_ours"] = round(fig["official_full_protocol_hours"] / fig["ours_full_protocol_hours"], 2)
    update(summary, "c_pipelines", fig)
    return fig


def lever_table(rows: list[dict[str, Any]], tag: str = "default") -> list[str]:
    """Markdown rows per config and lever of one tag: tokens/s, step, MFU, over the baseline, memory, compile."""
    lines = ["| config | lever | keys | tokens/s | step ms | MFU | x baseline | XLA peak GiB | compile s |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    base = {r["config"]: r for r in rows if r["tag"] == tag and r["lever"] == "baseline" and r.get("status") == "ran"}
    mine = [r for r in rows if r["tag"] == tag]
    configs = list(dict.fromkeys(r["config"] for r in mine if r["lever"] == "baseline")) + [r["config"] for r in mine]
    order = {config: i for i, config in reversed(list(enumerate(configs)))}
    for r in sorted(mine, key=lambda r: (order[r["config"]], r["lever"] != "baseline", r.get("status") != "ran")):
        keys = ", ".join(f"{k}={v}" for k, v in r.get("keys", {}).items()) or "-"
        name = pathlib.Path(r["config"]).stem
        if r.get("status") != "ran":
            lines.append(f"| {name} | {r['lever']} | {keys} | {r.get('status')} | | | | | |")
            continue
        b = base.get(r["config"])
        ratio = f"{r['tokens_per_s'] / b['tokens_per_s']:.3f}" if b else "-"
        peak = f"{r['memory']['peak'] / 2**30:.2f}" if r.get("memory") else "-"
        lines.append(f"| {name} | {r['lever']} | {keys} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.2f} | {r['mfu']:.3f} "
                     f"| {ratio} | {peak} | {r['compile_s']:.1f} |")
    return lines


def deterministic_table(rows: list[dict[str, Any]], prefix: str = "ops_") -> tuple[list[str], dict[str, Any]]:
    """causal_14m's tokens/s with and without deterministic ops (tags `prefix`default and
    `prefix`deterministic) per embedding gradient; slowdowns against the default mode's scatter (the
    recipe as it is)."""
    pick = {(r["tag"][len(prefix):], r["lever"]): r for r in rows
            if r["tag"].startswith(prefix) and r["config"].endswith("causal_14m.py") and r.get("status") == "ran"
            and r["lever"] in ("baseline", "one_hot_embedding_grad")}
    reference = pick.get(("default", "baseline"))
    lines = ["| XLA deterministic ops | model.embedding_grad | tokens/s | step ms | slowdown vs default scatter |",
             "| --- | --- | ---: | ---: | ---: |"]
    figures: dict[str, Any] = {}
    for tag in ("default", "deterministic"):
        for lever, grad in (("baseline", "scatter"), ("one_hot_embedding_grad", "one_hot")):
            r = pick.get((tag, lever))
            if not r:
                lines.append(f"| {tag} | {grad} | not measured | | |")
                continue
            slowdown = reference["tokens_per_s"] / r["tokens_per_s"] if reference else None
            figures[f"{tag}_{grad}_tokens_per_s"] = r["tokens_per_s"]
            if slowdown:
                figures[f"{tag}_{grad}_slowdown"] = round(slowdown, 3)
            lines.append(f"| {tag} | {grad} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.2f} | "
                         f"{f'{slowdown:.3f}' if slowdown else '-'} |")
    return lines, figures


def torch_table(torch_rows: list[dict[str, Any]], lever_rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """PyTorch's tokens/s and MFU beside our baseline of the same recipe (part a)."""
    ours = {pathlib.Path(r["config"]).stem: r for r in lever_rows
            if r["tag"] == "default" and r["lever"] == "baseline" and r.get("status") == "ran"}
    lines = ["| recipe | PyTorch model | batch | PyTorch tokens/s | PyTorch MFU | ours tokens/s | ours MFU | ours / PyTorch |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    figures: dict[str, Any] = {}
    for t in torch_rows:
        o = ours.get(t["name"])
        ratio = o["tokens_per_s"] / t["tokens_per_s"] if o else None
        if ratio:
            figures[f"{t['name']}_ours_over_torch"] = round(ratio, 3)
        figures[f"{t['name']}_torch_tokens_per_s"] = t["tokens_per_s"]
        mfu = f"{t['mfu']:.3f}" if t.get("mfu") is not None else "-"
        ours_rate, ours_mfu = (f"{o['tokens_per_s']:,.0f}", f"{o['mfu']:.3f}") if o else ("-", "-")
        model = t["class"] + ("" if t.get("compiled") else " (eager)")
        lines.append(f"| {t['name']} | {model} | {t['batch'][0]} x {t['batch'][1]} | {t['tokens_per_s']:,.0f} | {mfu} "
                     f"| {ours_rate} | {ours_mfu} | {f'{ratio:.2f}' if ratio else '-'} |")
    return lines, figures


def finish(summary: pathlib.Path, out: pathlib.Path, work: pathlib.Path) -> None:
    rows = load(out / "levers.json", [])
    torch_rows = [t for t in (load(p) for p in sorted(work.glob("torch_*.json"))) if t]
    if torch_rows:
        write(out / "torch_reference.json", torch_rows)
    md = ["# h200_speed.sh", "", "## a. Levers (tag default)", "", *lever_table(rows)]
    best = {}
    for r in rows:
        if r["tag"] == "default" and r.get("status") == "ran":
            name = pathlib.Path(r["config"]).stem
            if name not in best or r["mfu"] > best[name]["mfu"]:
                best[name] = r
    update(summary, "a_levers", {f"{n}_baseline_mfu": r["mfu"] for n, r in
                                 ((pathlib.Path(r["config"]).stem, r) for r in rows
                                  if r["tag"] == "default" and r["lever"] == "baseline" and r.get("status") == "ran")})
    update(summary, "a_levers", {f"{n}_best": {"lever": r["lever"], "mfu": r["mfu"], "tokens_per_s": r["tokens_per_s"]}
                                 for n, r in best.items()})
    det_lines, det = deterministic_table(rows)
    md += ["", "## b. Deterministic ops, causal_14m", "", *det_lines]
    scatter = load(out / "scatter_check.json")
    if scatter:
        for mode, result in scatter.items():
            cases = result.get("cases", {})
            det[f"scatter_mismatches_{mode}"] = sum(c.get("mismatches", 0) for c in cases.values()) if cases else result.get("error")
            det[f"scatter_not_repeatable_{mode}"] = [n for n, c in cases.items() if c.get("bitwise_repeatable") is False]
            bad = [f"{n} ({c.get('error') or str(c['mismatches']) + ' wrong'})" for n, c in cases.items()
                   if c.get("mismatches") or "error" in c]
            md += ["", f"scatter_check [{mode}] ({result.get('xla_flags', '')!r}): {len(cases)} cases, "
                   f"{det[f'scatter_mismatches_{mode}']} mismatching slots" + (": " + "; ".join(bad[:8]) if bad else "")]
    update(summary, "b_deterministic", det)
    torch_lines, torch_fig = torch_table(torch_rows, rows)
    md += ["", "## e. The PyTorch model of the same shape", "", *torch_lines]
    update(summary, "e_torch", torch_fig)
    s = load(summary, {})
    md += ["", "## c. The official pipeline beside ours (one export)", "", "```",
           json.dumps(s.get("c_pipelines", {}), indent=1, ensure_ascii=False), "```",
           "", "## d. A prepared workdir moved", "", "```", json.dumps(s.get("d_moved", {}), indent=1, ensure_ascii=False), "```"]
    (out / "table.md").write_text("\n".join(md) + "\n")


def main(argv: list[str]) -> None:
    command, summary = argv[0], pathlib.Path(argv[1])
    if command == "record":
        part, key, value = argv[2:5]
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        update(summary, part, {key: parsed})
    elif command == "moved":
        workdir, log = pathlib.Path(argv[2]), pathlib.Path(argv[3]).read_text(errors="replace")
        update(summary, "d_moved", moved_figures(workdir, log))
    elif command == "pipelines":
        out, work, log = pathlib.Path(argv[2]), pathlib.Path(argv[3]), pathlib.Path(argv[4]).read_text(errors="replace")
        pipelines(summary, out, work, log, argv[5] if len(argv) > 5 else "")
    elif command == "finish":
        finish(summary, pathlib.Path(argv[2]), pathlib.Path(argv[3]))
    else:
        sys.exit(f"unknown command {command!r}: record, moved, pipelines or finish")


if __name__ == "__main__":
    main(sys.argv[1:])
