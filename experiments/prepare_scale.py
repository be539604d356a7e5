"""The scale test of `prepare` (issue 38): a corpus of N million jieba words in the official parquet
layout, written from text we have, then `python -m babylm_jax.prepare` on it with the time and peak
memory of each stage.

    python experiments/prepare_scale.py --million_words 10 --workdir /tmp/scale10 \
        [--data_dir ../shared/data] [--out_json scale10.json]

The corpus: the built-in corpus plus the JSONL `text` corpora of `<data_dir>/corpus_*`, repeated in
a new shuffled order each pass, each document varied (its sentences shuffled, or cut in two at a
sentence end), written as `<workdir>/corpus/data/train-NNNNN-of-MMMMM.parquet` (columns `text`,
`source`), as `huggingface-cli download chinese-babylm-org/babylm-zho-100M` lays it out. Its content
is not the point, its size and shape are. Words are estimated from characters with the ratio jieba
gives on a sample of the base documents (so writing it does not jieba-count it); prepare's
budget.json then says the exact count.

Prepare runs with the BPE tokenizer (vocab 8,000) and, with --data_dir, the leakage check. Its
stages are told apart by its own progress output, timestamped as it arrives: the bars `count words`
(normalisation and jieba counting, one pass in worker processes), `SentencePiece: training` and
`tokenise` (a bar's end: it clears its line), and the lines it prints after the token cache is
merged (`budget:`) and after the leakage check (`leakage (`). Memory is the summed RSS of prepare's
process tree (it and its workers), sampled every 0.2 s. The share of normalisation in the counting
stage is measured apart, in this process, on a sample of the documents. Writes a JSON report and
prints a table with the load average and the matmul peak (experiments/benchmarks/conditions.py).
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
from typing import Iterator

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "benchmarks"))
from babylm_jax.core.atomic import atomic_dir, atomic_write_json, atomic_write_text  # noqa: E402
from babylm_jax.core.text import Normalizer, normalize_document  # noqa: E402
from babylm_jax.corpus import builtin, words  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[。！？；!?\n])")
SAMPLE_INTERVAL_S = 0.2
# (pattern in prepare's output, the stage that starts there), in the order prepare reaches them.
STAGE_MARKS = [
    (re.compile(r"count words"), "normalise + count words"),
    (re.compile(r"^\s+$"), "budget + char counts"),  # a finished bar (leave=False) clears its line with spaces
    (re.compile(r"SentencePiece: training"), "tokenizer training"),
    (re.compile(r"tokenise"), "tokenisation"),
    (re.compile(r"^\s+$"), "token cache (merge)"),
    (re.compile(r"^budget: "), "leakage check"),
    (re.compile(r"^leakage \("), "reports"),
]
FIRST_STAGE = "start-up + reading (eval items, corpus pass)"


def base_documents(data_dir: pathlib.Path | None) -> list[tuple[str, str]]:
    """(source, text) of the built-in corpus and of every `<data_dir>/corpus_*/*.jsonl` `text` row."""
    documents = [("builtin", text) for path in builtin.builtin_files()
                 for _, text in builtin.iter_builtin_file(path) if text.strip()]
    for path in sorted(data_dir.glob("corpus_*/*.jsonl")) if data_dir else ():
        with open(path, encoding="utf-8") as f:
            documents += [(path.parent.name, row["text"]) for row in map(json.loads, f) if row.get("text", "").strip()]
    return documents


def chars_per_word(documents: list[tuple[str, str]], sample_chars: int, seed: int) -> float:
    """Characters per jieba word on a random sample of about `sample_chars` characters."""
    order = np.random.default_rng(seed).permutation(len(documents))
    chars = count = 0
    for i in order:
        text = documents[i][1]
        chars, count = chars + len(text), count + len(words.jieba_words(text))
        if chars >= sample_chars:
            break
    return chars / count


def vary(text: str, rng: np.random.Generator) -> list[str]:
    """One document made different: its sentences shuffled (half the time), then cut in two at a
    sentence end (half the time)."""
    sentences = [s for s in SENTENCE_END.split(text) if s]
    if len(sentences) > 1 and rng.random() < 0.5:
        sentences = [sentences[i] for i in rng.permutation(len(sentences))]
    if len(sentences) > 1 and rng.random() < 0.5:
        cut = int(rng.integers(1, len(sentences)))
        return ["".join(sentences[:cut]).strip(), "".join(sentences[cut:]).strip()]
    return ["".join(sentences).strip()]


def hanzi_pool(documents: list[tuple[str, str]], sample_docs: int = 20_000) -> np.ndarray:
    """The code points of the hanzi of the first `sample_docs` documents, one per occurrence (so a
    draw from it follows their frequencies)."""
    points = np.frombuffer("".join(t for _, t in documents[:sample_docs]).encode("utf-32-le"), dtype=np.uint32)
    return points[(points >= 0x4E00) & (points <= 0x9FD5)]


def freshen(text: str, share: float, pool: np.ndarray, rng: np.random.Generator) -> str:
    """`text` with about `share` of its hanzi replaced by hanzi drawn from `pool`: repeated passes then
    repeat few blocks, as a real corpus of this size does (the segmenter remembers blocks)."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).copy()
    chosen = (points >= 0x4E00) & (points <= 0x9FD5) & (rng.random(len(points)) < share)
    points[chosen] = pool[rng.integers(0, len(pool), int(chosen.sum()))]
    return points.tobytes().decode("utf-32-le")


def varied_documents(documents: list[tuple[str, str]], seed: int, fresh_share: float = 0.0) -> Iterator[tuple[str, str]]:
    """(source, text) without end: pass after pass over `documents`, each in a new order, varied;
    after the first pass, with `fresh_share` of the hanzi replaced (`freshen`)."""
    rng, pool = np.random.default_rng(seed), hanzi_pool(documents)
    for passes in itertools.count():
        for i in rng.permutation(len(documents)):
            source, text = documents[i]
            if passes and fresh_share:
                text = freshen(text, fresh_share, pool, rng)
            yield from ((source, piece) for piece in vary(text, rng) if piece)


def write_corpus(out: pathlib.Path, million_words: float, data_dir: pathlib.Path | None, seed: int = 0,
                 shard_million_words: float = 5.0, sample_chars: int = 300_000, fresh_share: float = 0.0) -> dict:
    """Writes `out/data/train-*.parquet` holding about `million_words` M jieba words (estimated with
    the characters per word of a sample of `sample_chars`; `fresh_share`: see `freshen`); returns its stats."""
    documents = base_documents(data_dir)
    ratio = chars_per_word(documents, sample_chars, seed)
    target_chars = int(million_words * 1e6 * ratio)
    shard_chars = int(shard_million_words * 1e6 * ratio)
    num_files = max(1, math.ceil(million_words / shard_million_words - 1e-9))
    stream = varied_documents(documents, seed, fresh_share)
    total_chars = total_docs = 0
    with atomic_dir(out, replace=True) as tmp:
        (tmp / "data").mkdir()
        for index in range(num_files):
            goal = shard_chars if index < num_files - 1 else target_chars - total_chars
            rows, chars = [], 0
            while chars < goal:
                rows.append(next(stream))
                chars += len(rows[-1][1])
            table = pa.table({"text": [t for _, t in rows], "source": [s for s, _ in rows]})
            pq.write_table(table, tmp / "data" / f"train-{index:05d}-of-{num_files:05d}.parquet")
            total_chars, total_docs = total_chars + chars, total_docs + len(rows)
    return {"files": num_files, "documents": total_docs, "characters": total_chars, "chars_per_word": ratio,
            "estimated_words": int(total_chars / ratio), "base_documents": len(documents), "fresh_share": fresh_share}


def normalisation_share(corpus: pathlib.Path, sample_docs: int = 2000) -> float:
    """Normalisation's share of normalise + jieba-count time, on the first documents of the corpus."""
    first = sorted((corpus / "data").glob("*.parquet"))[0]
    texts = pq.read_table(first, columns=["text"]).column("text").to_pylist()[:sample_docs]
    options = Normalizer(nfkc=False, to_simplified=False, clean_whitespace=True, drop_empty_lines=True)
    start = time.perf_counter()
    normalised = [normalize_document(t, options) for t in texts]
    middle = time.perf_counter()
    for t in normalised:
        words.jieba_words(t)
    end = time.perf_counter()
    return (middle - start) / (end - start)


class TreeMemory:
    """Samples the summed RSS of a process and its descendants; keeps the peak of each stage."""

    def __init__(self, pid: int):
        self.process, self.stage = psutil.Process(pid), FIRST_STAGE
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        total = 0
        for p in [self.process] + self.process.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:  # a worker that just ended
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            try:
                rss = self._rss()
            except psutil.Error:  # prepare itself ended
                return
            self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss)

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def prepare_command(corpus: pathlib.Path, workdir: pathlib.Path, data_dir: pathlib.Path | None, vocab: int) -> list[str]:
    """`python -m babylm_jax.prepare` on `corpus` with the BPE tokenizer and, with `data_dir`, the leakage check."""
    command = [sys.executable, "-m", "babylm_jax.prepare", f"--config={ROOT / 'configs' / 'base.py'}",
               f"--workdir={workdir}", f"--config.data.corpus={corpus}", "--config.data.tokenizer.kind=bpe",
               f"--config.model.vocab_size={vocab}", "--config.data.allow_over_budget=True"]
    return command + ([f"--data_dir={data_dir}"] if data_dir else [])


def output_pieces(stream) -> Iterator[tuple[str, bool]]:
    """(piece, whole) for the pieces of a byte stream between carriage returns and newlines, as they
    arrive: tqdm writes '\\r' + bar, so a bar is seen (whole=False) before the next write ends it."""
    buffer = ""
    for chunk in iter(lambda: stream.read1(65536), b""):
        buffer += chunk.decode("utf-8", errors="replace")
        *pieces, buffer = re.split(r"[\r\n]", buffer)
        yield from ((piece, True) for piece in pieces)
        if buffer:
            yield buffer, False
    yield buffer, True


def reached_mark(piece: str, next_mark: int) -> int | None:
    """The index of the first mark of STAGE_MARKS[next_mark:] that `piece` shows (a line of spaces:
    only the next mark), or None."""
    last = len(STAGE_MARKS) if piece.strip() else min(next_mark + 1, len(STAGE_MARKS))
    return next((k for k in range(next_mark, last) if STAGE_MARKS[k][0].search(piece)), None)


def run_prepare(command: list[str], log_path: pathlib.Path) -> tuple[list[dict], int]:
    """Runs `command`, timing each stage by the marks of STAGE_MARKS; (stages, exit status)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    starts, next_mark = [(FIRST_STAGE, 0.0)], 0
    with TreeMemory(process.pid) as memory, open(log_path, "w", encoding="utf-8", buffering=1) as log:
        for piece, whole in output_pieces(process.stdout):
            if whole:
                log.write(f"{time.perf_counter() - start:9.2f} {piece}\n")
            k = reached_mark(piece, next_mark)
            if k is not None:
                starts.append((STAGE_MARKS[k][1], time.perf_counter() - start))
                memory.stage, next_mark = STAGE_MARKS[k][1], k + 1
        status = process.wait()
    end = time.perf_counter() - start
    bounds = starts + [("end", end)]
    stages = [{"stage": name, "seconds": round(bounds[i + 1][1] - t, 2), "peak_rss_mb": round(memory.peaks.get(name, 0) / 2**20)}
              for i, (name, t) in enumerate(starts)]
    return stages, status


def table(stages: list[dict]) -> str:
    """The stages as aligned text: stage, seconds, peak RSS MB ('-': shorter than one sample)."""
    rows = [[s["stage"], f"{s['seconds']:.1f}", f"{s['peak_rss_mb']:,}" if s["peak_rss_mb"] else "-"] for s in stages]
    rows.append(["total", f"{sum(s['seconds'] for s in stages):.1f}", f"{max(s['peak_rss_mb'] for s in stages):,}"])
    widths = [max(len(r[i]) for r in rows + [["stage", "seconds", "peak RSS MB"]]) for i in range(3)]
    line = lambda r: f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}"  # noqa: E731
    return "\n".join([line(["stage", "seconds", "peak RSS MB"])] + [line(r) for r in rows])


def git_commit() -> str:
    """The commit this script runs at (with '+dirty' when the tree has changes)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--million_words", type=float, default=10.0)
    parser.add_argument("--workdir", type=pathlib.Path, required=True, help="corpus/ and the prepare workdir run/ go here")
    parser.add_argument("--data_dir", type=pathlib.Path, default=os.environ.get("BABYLM_DATA_DIR"),
                        help="base corpora (corpus_*) and evaluation data for the leakage check")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh_share", type=float, default=0.0,
                        help="after the first pass, replace this share of the hanzi (e.g. 0.05), so that few blocks repeat")
    parser.add_argument("--out_json", type=pathlib.Path, help="default: <workdir>/scale.json")
    args = parser.parse_args()
    from conditions import Conditions  # imports jax: after the arguments are parsed

    conditions = Conditions.start()
    conditions.probe()
    started, commit, corpus = datetime.datetime.now(datetime.timezone.utc), git_commit(), args.workdir / "corpus"
    write_start = time.perf_counter()
    written = write_corpus(corpus, args.million_words, args.data_dir, args.seed, fresh_share=args.fresh_share)
    written["seconds"] = round(time.perf_counter() - write_start, 1)
    print(f"corpus: {written['files']} parquet files, {written['documents']:,} documents, {written['characters']:,} "
          f"characters, ~{written['estimated_words']:,} words at {written['chars_per_word']:.3f} characters a word "
          f"({written['seconds']} s) -> {corpus}", flush=True)
    command = prepare_command(corpus, args.workdir / "run", args.data_dir, args.vocab_size)
    stages, status = run_prepare(command, args.workdir / "prepare.log")
    if status:
        sys.exit(f"prepare failed with status {status}; see {args.workdir / 'prepare.log'}")
    conditions.probe()
    lines: list[str] = []
    conditions.report(lines.append)
    budget = json.loads((args.workdir / "run" / "budget.json").read_text())
    report = {"date": started.isoformat(timespec="seconds"), "commit": commit, "million_words": args.million_words,
              "corpus": written, "words_raw": budget["words_raw"], "words": budget["words"], "command": command,
              "stages": stages, "normalisation_share_of_count": round(normalisation_share(corpus), 3),
              "load_before": conditions.load_before, "load_after": os.getloadavg(),
              "matmul_peak_gflops": round(conditions.run_peak / 1e9, 1), "conditions": lines}
    text = "\n".join([table(stages), f"words_raw {budget['words_raw']:,} (estimated {written['estimated_words']:,}); "
                      f"normalisation ~{report['normalisation_share_of_count']:.0%} of the count stage (sample)"] + lines)
    out_json = args.out_json or args.workdir / "scale.json"
    atomic_write_json(out_json, report)
    atomic_write_text(out_json.with_suffix(".txt"), text + "\n")
    print(text)


if __name__ == "__main__":
    main()
