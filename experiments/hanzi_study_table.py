"""One finished arm of the hanzi study as a row of $OUT/results.jsonl, and the table of all rows.

    python experiments/hanzi_study_table.py --out OUT --arm NAME --workdir RUN --share X --seed S \
        --facts FACTS_DIR --flags "..."     # appends the row, rewrites OUT/results.md
    python experiments/hanzi_study_table.py --out OUT          # rewrites OUT/results.md only
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from recipe_study import loss_text  # noqa: E402  (as the recipe study writes an eval loss)

from babylm_jax.core.atomic import atomic_write_text  # noqa: E402
from babylm_jax.corpus.tokenizer_kinds import load_tokenizer  # noqa: E402

TASKS = ("hanzi_structure", "hanzi_pinyin", "zhoblimp")
UIDS = {"hanzi_structure": ("radical", "has_part", "part_position", "structure_type"),
        "hanzi_pinyin": ("same_syllable", "same_initial", "same_final", "same_tone", "reading_tone")}


def _json(path: pathlib.Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _without_own_id(tokenizer, text: str) -> int:
    """Distinct non-space characters of `text` that are not one piece of their own."""
    return sum([tokenizer.id_to_piece(i) for i in tokenizer.encode(c)] != [c] for c in set(text) if not c.isspace())


def _last_aux(workdir: pathlib.Path) -> dict:
    last = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if any(k.startswith("aux_") for k in record):
            last = {k: round(v, 3) for k, v in record.items() if k.startswith("aux_") and k.endswith("_acc")}
    return last


def row(args: argparse.Namespace) -> dict:
    workdir = pathlib.Path(args.workdir)
    details = _json(workdir / "eval" / "results_details.json")["tasks"]
    budget = _json(workdir / "budget.json")
    leaks = _json(workdir / "leakage.json")["tasks"]
    facts_text = ""
    if args.facts:
        lines = (pathlib.Path(args.facts) / "hanzi_facts.jsonl").read_text(encoding="utf-8").splitlines()
        facts_text = "".join(json.loads(line)["text"] for line in lines)
    tokenizer = load_tokenizer(workdir / "tokenizer")
    return {
        "arm": args.arm, "share": args.share, "seed": args.seed, "flags": args.flags,
        "words": budget["words"],
        "fact_words": sum(s["words"] for name, s in budget["sources"].items() if "facts" in name),
        **{t: round(details[t]["accuracy"], 4) for t in TASKS},
        "per_uid": {t: {u: round(details[t]["per_uid"][u], 3) for u in UIDS[t]} for t in UIDS},
        "unk_items": sum(t["unk_items"] for t in _json(workdir / "unk_audit.json").values()),
        "facts_chars_without_own_id": _without_own_id(tokenizer, facts_text),
        "probe_items_leaked": sum(leaks[t]["leaked"] for t in UIDS),
        "eval_loss": _json(workdir / "summary.json")["final_eval_loss"],
        "aux_acc": _last_aux(workdir),
        "train_minutes": round(_json(workdir / "summary.json")["wall_time_s"] / 60, 1),
    }


def table(rows: list[dict]) -> str:
    head = ["arm", "seed", "facts share", "hanzi_structure", "hanzi_pinyin", "zhoblimp",
            "structure per UID (" + " / ".join(UIDS["hanzi_structure"]) + ")",
            "pinyin per UID (" + " / ".join(UIDS["hanzi_pinyin"]) + ")",
            "eval loss", "head acc at the end", "UNK items", "probe items leaked", "train min"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        uid = {t: " / ".join(f"{r['per_uid'][t][u]:.2f}" for u in UIDS[t]) for t in UIDS}
        aux = ", ".join(f"{k[4:-4]} {v:.2f}" for k, v in r["aux_acc"].items()) or "-"
        lines.append(f"| {r['arm']} | {r['seed']} | {r['share']} | {r['hanzi_structure']:.3f} | "
                     f"{r['hanzi_pinyin']:.3f} | {r['zhoblimp']:.4f} | {uid['hanzi_structure']} | "
                     f"{uid['hanzi_pinyin']} | {loss_text(r['eval_loss'])} | {aux} | {r['unk_items']} | "
                     f"{r['probe_items_leaked']} | {r['train_minutes']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    for name in ("arm", "workdir", "share", "facts", "flags"):
        parser.add_argument(f"--{name}", default="")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    results = out / "results.jsonl"
    if args.arm:
        with open(results, "a", encoding="utf-8") as f:
            f.write(json.dumps(row(args), ensure_ascii=False) + "\n")
    rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()] if results.exists() else []
    atomic_write_text(out / "results.md", table(rows))
    print(table(rows[-1:]) if rows else "no rows")


if __name__ == "__main__":
    main()
