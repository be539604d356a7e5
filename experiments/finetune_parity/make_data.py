"""Writes the data folder of the fine-tuning side by side (experiments/finetune_parity).

    python experiments/finetune_parity/make_data.py OUT --train_examples N [--seed 0] \
        [--shared ../shared] [--diagnostic_examples 600]

OUT/full_eval/clue/<task>.{train,valid}.jsonl in the exact shape the official preparation
(`prepare_chinese_data.py` of SiyuanSong2004/chinese-babylm-eval-pipeline at 2c8a2d9) writes:

- afqmc        {sentence1, sentence2, label int}           from shared/data/afqmc (34,334 / 4,316)
- ocnli        {sentence1, sentence2, label int}           from shared/clue_full/ocnli (50k; "-" rows dropped;
                                                            0 neutral, 1 entailment, 2 contradiction)
- tnews        {sentence, label 0..14}                     from shared/clue_full/tnews (53k; id = index of
                                                            the code in the sorted codes)
- cluewsc2020  {text, span1_text, span2_text, label 0/1}   from shared/data/cluewsc2020 (0 true, 1 false)

Training files hold a FIXED subset of N examples per task (a seeded random sample kept in file
order; the whole split when it has fewer); the valid files are the FULL dev splits.

The challenge's two hidden tasks have no public data; fixtures of our own in their real formats:

- OUT/diagnostic_nli/diagnostic.jsonl: rows {sentence1, sentence2, label (neutral/entailment/
  contradiction, a string), phenomenon (the row's OCNLI genre)}, a seeded sample of ocnli dev rows.
  babylm_jax trains diagnostic_nli on ocnli's training file (here full_eval/clue/ocnli.train.jsonl).
- OUT/c3/c3-{d,m}-{train,dev}.json: each ONE JSON list of
  [[paragraph], [{"question", "choice": [...], "answer"}], id], made from OCNLI premises grouped by
  (prem_id, premise): passage = the premise, a fixed question, choices = one hypothesis per label the
  premise has (the first in file order; always the entailment one plus at least one other, so 2 or 3
  choices, as C3 has 2 to 4), shuffled with the seed; answer = the entailment hypothesis. Genre
  "phone" (telephone transcripts) goes to the dialogue file c3-d, the others to c3-m. Train: N
  questions sampled from clue_full's ocnli train premises; dev: every qualifying ocnli dev premise.

No text of the data is kept in the repository: run this to make the folder.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import random
import sys

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SHARED = HERE.parents[2] / "shared" if (HERE.parents[2] / "shared").is_dir() else pathlib.Path("/work/shared")

NLI_LABELS = ("neutral", "entailment", "contradiction")  # official ids 0, 1, 2 (Hugging Face clue/ocnli)
WSC_LABELS = ("true", "false")  # official ids 0, 1 (Hugging Face clue/cluewsc2020 ClassLabel order)
OCNLI_DROPPED = "-"
C3_QUESTION = "下面哪一句与上文的意思一致？"
C3_DIALOGUE_GENRES = ("phone",)


def read_jsonl(path: pathlib.Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(rows: list[dict], path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_json(value, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False) + "\n", encoding="utf-8")


def subset(rows: list, n: int, seed: int, name: str) -> list:
    """n rows drawn at random (seeded per task), kept in file order; all of them when there are fewer."""
    if len(rows) <= n:
        return list(rows)
    keep = sorted(random.Random(f"{name}:{seed}").sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def afqmc_rows(path: pathlib.Path) -> list[dict]:
    out = []
    for row in read_jsonl(path):
        label = str(row["label"])
        if label not in ("0", "1"):
            raise ValueError(f"{path}: afqmc label {row['label']!r}")
        out.append({"sentence1": row["sentence1"], "sentence2": row["sentence2"], "label": int(label)})
    return out


def ocnli_rows(path: pathlib.Path) -> tuple[list[dict], int]:
    out, dropped = [], 0
    for row in read_jsonl(path):
        if row["label"] == OCNLI_DROPPED:
            dropped += 1
            continue
        out.append({"sentence1": row["sentence1"], "sentence2": row["sentence2"],
                    "label": NLI_LABELS.index(row["label"])})
    return out, dropped


def tnews_rows(path: pathlib.Path, codes: list[str]) -> list[dict]:
    out = []
    for row in read_jsonl(path):
        code = str(row["label"])
        if code not in codes:
            raise ValueError(f"{path}: tnews label {row['label']!r} not among the codes {codes}")
        out.append({"sentence": row["sentence"], "label": codes.index(code)})
    return out


def wsc_rows(path: pathlib.Path) -> list[dict]:
    out = []
    for row in read_jsonl(path):
        target = row["target"]
        out.append({"text": row["text"], "span1_text": target["span1_text"], "span2_text": target["span2_text"],
                    "label": WSC_LABELS.index(str(row["label"]))})
    return out


def c3_questions(rows: list[dict], seed: int, split: str) -> list[tuple[str, list]]:
    """(genre, c3 item) per premise with an entailment hypothesis and at least one other label, in file order."""
    groups: dict[tuple, dict[str, str]] = collections.OrderedDict()
    genres: dict[tuple, str] = {}
    for row in rows:
        if row["label"] not in NLI_LABELS or row.get("prem_id") is None:
            continue
        key = (row["prem_id"], row["sentence1"])
        groups.setdefault(key, {}).setdefault(row["label"], row["sentence2"])  # the first hypothesis per label
        genres[key] = row.get("genre") or ""
    items = []
    for number, (key, by_label) in enumerate(groups.items()):
        if "entailment" not in by_label or len(by_label) < 2:
            continue
        choices = [by_label[label] for label in ("entailment", "neutral", "contradiction") if label in by_label]
        if len(set(choices)) < len(choices):  # identical hypotheses under two labels: no single answer
            continue
        answer = choices[0]
        random.Random(f"c3:{split}:{seed}:{key[0]}:{number}").shuffle(choices)
        item = [[key[1]], [{"question": C3_QUESTION, "choice": choices, "answer": answer}], f"{split}-{key[0]}"]
        items.append((genres[key], item))
    return items


def write_c3(items: list[tuple[str, list]], out: pathlib.Path, split: str) -> dict[str, int]:
    by_file = {"d": [], "m": []}
    for genre, item in items:
        by_file["d" if genre in C3_DIALOGUE_GENRES else "m"].append(item)
    for kind, entries in by_file.items():
        write_json(entries, out / "c3" / f"c3-{kind}-{split}.json")
    return {kind: len(entries) for kind, entries in by_file.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--train_examples", type=int, required=True, help="training examples kept per task")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsets and of the c3 choice order")
    parser.add_argument("--shared", type=pathlib.Path, default=DEFAULT_SHARED,
                        help="the folder holding data/ and clue_full/ (default %(default)s)")
    parser.add_argument("--diagnostic_examples", type=int, default=600, help="ocnli dev rows in the diagnostic fixture")
    args = parser.parse_args(argv)
    if args.train_examples <= 0:
        parser.error("--train_examples must be positive")
    data, full = args.shared / "data", args.shared / "clue_full"
    clue = args.out / "full_eval" / "clue"
    counts: dict[str, dict] = {}

    def put(task: str, train: list[dict], valid: list[dict], **extra) -> None:
        kept = subset(train, args.train_examples, args.seed, task)
        write_jsonl(kept, clue / f"{task}.train.jsonl")
        write_jsonl(valid, clue / f"{task}.valid.jsonl")
        counts[task] = {"train": len(kept), "train_of": len(train), "valid": len(valid), **extra}

    put("afqmc", afqmc_rows(data / "afqmc" / "train.json"), afqmc_rows(data / "afqmc" / "dev.json"))
    ocnli_train, train_dropped = ocnli_rows(full / "ocnli" / "train.json")
    ocnli_dev, dev_dropped = ocnli_rows(full / "ocnli" / "dev.json")
    put("ocnli", ocnli_train, ocnli_dev, dropped_dash={"train": train_dropped, "valid": dev_dropped})
    codes = sorted(str(json.loads(line)["label"]) for line in (full / "tnews" / "labels.json").open(encoding="utf-8")
                   if line.strip())
    if len(codes) != 15:
        raise ValueError(f"tnews labels.json: expected 15 codes, got {codes}")
    put("tnews", tnews_rows(full / "tnews" / "train.json", codes), tnews_rows(full / "tnews" / "dev.json", codes))
    put("cluewsc2020", wsc_rows(data / "cluewsc2020" / "train.json"), wsc_rows(data / "cluewsc2020" / "dev.json"))

    dev_raw = [row for row in read_jsonl(full / "ocnli" / "dev.json") if row["label"] != OCNLI_DROPPED]
    diagnostic = [{"sentence1": row["sentence1"], "sentence2": row["sentence2"], "label": row["label"],
                   "phenomenon": row.get("genre") or "unknown"}
                  for row in subset(dev_raw, args.diagnostic_examples, args.seed, "diagnostic_nli")]
    write_jsonl(diagnostic, args.out / "diagnostic_nli" / "diagnostic.jsonl")
    counts["diagnostic_nli"] = {"train": counts["ocnli"]["train"], "train_file": "full_eval/clue/ocnli.train.jsonl",
                                "valid": len(diagnostic),
                                "phenomena": dict(collections.Counter(r["phenomenon"] for r in diagnostic))}

    train_items = c3_questions(read_jsonl(full / "ocnli" / "train.json"), args.seed, "train")
    kept_items = subset(train_items, args.train_examples, args.seed, "c3")
    dev_items = c3_questions(read_jsonl(full / "ocnli" / "dev.json"), args.seed, "dev")
    counts["c3"] = {"train": write_c3(kept_items, args.out, "train"), "train_of": len(train_items),
                    "valid": write_c3(dev_items, args.out, "dev"),
                    "choices_valid": dict(collections.Counter(len(i[1][0]["choice"]) for _, i in dev_items))}

    (args.out / "make_data.json").write_text(json.dumps(
        {"train_examples": args.train_examples, "seed": args.seed, "shared": str(args.shared), "counts": counts},
        indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for task, count in counts.items():
        print(f"{task:15s} {json.dumps(count, ensure_ascii=False)}")
    print(f"wrote {args.out} (counts in {args.out / 'make_data.json'})")


if __name__ == "__main__":
    sys.exit(main())
