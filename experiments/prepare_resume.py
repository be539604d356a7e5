"""A killed `prepare` resumes (issue 38): on a corpus that `prepare_scale.py` wrote and prepared, run
`prepare` again into a new workdir, kill its whole process tree (SIGKILL, no chance to tidy up) when a
stage's progress bar passes a share, run it again, and so on through the kills asked for; then the
last run finishes. The result must equal the uninterrupted run's, file for file (sha256 of every file
of the counted shards, the tokenizer, the token cache, budget.json and leakage.json).

    python experiments/prepare_resume.py --scale_workdir /tmp/scale102 \
        [--kill "count words:0.5" --kill "tokenise:0.5"] [--out_json resume102.json]

Prints each run's seconds and how far it got, the files that differ (none, when it resumes right),
and the conditions (load, matmul peak).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT / "experiments" / "benchmarks"))
from prepare_scale import git_commit, output_pieces, prepare_command  # noqa: E402
from babylm_jax.core.atomic import atomic_write_json  # noqa: E402

BAR = re.compile(r"^(?P<stage>[^:]+):\s+(?P<percent>\d+)%")
COMPARED = ("budget.json", "leakage.json", "tokenizer", "data")


def parse_kill(text: str) -> tuple[str, float]:
    """'count words:0.5' -> ('count words', 0.5)."""
    stage, _, share = text.rpartition(":")
    if not stage or not 0 < float(share) < 1:
        raise argparse.ArgumentTypeError(f"--kill {text!r}: expected '<bar name>:<share in (0, 1)>'")
    return stage, float(share)


def run_until(command: list[str], log: pathlib.Path, kill: tuple[str, float] | None) -> dict:
    """Runs `command` in its own process group; with `kill`, SIGKILLs the group once the bar named
    kill[0] shows at least kill[1]. Returns seconds, exit status and the last bar seen."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    start, last_bar = time.perf_counter(), ""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                               start_new_session=True)
    with open(log, "w", encoding="utf-8") as out:
        for piece, _ in output_pieces(process.stdout):
            out.write(f"{time.perf_counter() - start:9.2f} {piece}\n")
            if match := BAR.match(piece.strip()):
                last_bar = piece.strip()
                if kill and match["stage"] == kill[0] and int(match["percent"]) >= kill[1] * 100:
                    os.killpg(process.pid, signal.SIGKILL)
                    break
        status = process.wait()
    return {"seconds": round(time.perf_counter() - start, 1), "status": status, "killed_at": last_bar if kill else None}


def file_digests(workdir: pathlib.Path) -> dict[str, str]:
    """sha256 of every file under the compared parts of a prepare workdir, by relative path."""
    digests = {}
    for part in COMPARED:
        paths = [workdir / part] if (workdir / part).is_file() else sorted((workdir / part).rglob("*"))
        for path in paths:
            if path.is_file() and path.name != "prepared.json":  # prepared.json records the workdir's own path
                digests[str(path.relative_to(workdir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale_workdir", type=pathlib.Path, required=True,
                        help="a workdir of prepare_scale.py: its corpus/ and the uninterrupted run/")
    parser.add_argument("--kill", type=parse_kill, action="append", help="'<bar>:<share>', in order (default: "
                        "'count words:0.5' then 'tokenise:0.5')")
    parser.add_argument("--data_dir", type=pathlib.Path, default=os.environ.get("BABYLM_DATA_DIR"))
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--out_json", type=pathlib.Path, help="default: <scale_workdir>/resume.json")
    args = parser.parse_args()
    from conditions import Conditions  # imports jax: after the arguments are parsed

    conditions = Conditions.start()
    kills = args.kill or [("count words", 0.5), ("tokenise", 0.5)]
    workdir = args.scale_workdir / "resumed"
    if workdir.exists():
        sys.exit(f"{workdir} exists: remove it first (this check prepares it from nothing)")
    command = prepare_command(args.scale_workdir / "corpus", workdir, args.data_dir, args.vocab_size)
    runs = []
    for i, kill in enumerate([*kills, None]):
        runs.append(run_until(command, args.scale_workdir / f"resume-{i}.log", kill))
        print(f"run {i}: {runs[-1]['seconds']} s, status {runs[-1]['status']}"
              + (f", killed at {runs[-1]['killed_at']!r}" if kill else ""), flush=True)
    reference, resumed = file_digests(args.scale_workdir / "run"), file_digests(workdir)
    differing = sorted(k for k in reference.keys() | resumed.keys() if reference.get(k) != resumed.get(k))
    conditions.probe()
    lines: list[str] = []
    conditions.report(lines.append)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": git_commit(), "runs": runs, "files_compared": len(reference), "files_differing": differing,
              "load_before": conditions.load_before, "load_after": os.getloadavg(),
              "matmul_peak_gflops": round(conditions.run_peak / 1e9, 1), "conditions": lines}
    atomic_write_json(args.out_json or args.scale_workdir / "resume.json", report)
    print(f"{len(reference)} files compared with the uninterrupted run; {len(differing)} differ"
          + (": " + ", ".join(differing[:10]) if differing else ""))
    print("\n".join(lines))
    if differing or runs[-1]["status"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
