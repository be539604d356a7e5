"""Train losses of an interrupted-and-resumed run against an uninterrupted one (their metrics.jsonl).

    python experiments/benchmarks/resume_check.py RUN_UNINTERRUPTED RUN_RESUMED --resumed_from STEP [--out F.json]

Takes each run's last record per step (a resumed run's metrics.jsonl is trimmed to its checkpoint
and then appended to), and compares `loss` at every step both logged: before the resume (the
same program up to the checkpoint: should be equal) and after it (restored state, optimizer and
data iterator). Prints the largest absolute difference of each part and writes every step's
pair to the JSON. Exit status 0 whatever the differences (they are figures, not a verdict).
"""
from __future__ import annotations

import argparse
import json
import pathlib


def losses(run: str) -> dict[int, float]:
    by_step = {}
    for line in (pathlib.Path(run) / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "loss" in record and "step" in record:
            by_step[int(record["step"])] = float(record["loss"])
    return by_step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uninterrupted")
    parser.add_argument("resumed")
    parser.add_argument("--resumed_from", type=int, required=True, help="the checkpoint step the resume started from")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    a, b = losses(args.uninterrupted), losses(args.resumed)
    steps = sorted(set(a) & set(b))
    rows = [{"step": s, "uninterrupted": a[s], "resumed": b[s], "abs_diff": abs(a[s] - b[s])} for s in steps]
    report = {"resumed_from": args.resumed_from, "steps_compared": len(rows), "steps": rows}
    parts = (("before_resume", lambda s: s <= args.resumed_from), ("after_resume", lambda s: s > args.resumed_from))
    for part, keep in parts:
        diffs = [r["abs_diff"] for r in rows if keep(r["step"])]
        report[part] = {"steps": len(diffs), "max_abs_diff": max(diffs) if diffs else None,
                        "exact": bool(diffs) and max(diffs) == 0.0}
        print(f"{part}: {len(diffs)} logged steps, max |loss difference| "
              f"{'n/a' if not diffs else f'{max(diffs):.3g}'}{' (bit-equal)' if report[part]['exact'] else ''}")
    if rows:
        last = rows[-1]
        print(f"last step {last['step']}: uninterrupted {last['uninterrupted']:.5f}, resumed {last['resumed']:.5f}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
