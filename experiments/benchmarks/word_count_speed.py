"""The official word count, jieba.cut against the faster exact segmenter (corpus/segmenter.py), document by document.

    python experiments/benchmarks/word_count_speed.py [--data_dir ../shared/data] \
        [--parquet /tmp/scale102/corpus/data --every 10] [--out_json word_count.json]

Documents: the built-in corpus and the JSONL corpora of `<data_dir>/corpus_*` (what
experiments/prepare_scale.py builds its corpora from), plus with `--parquet` every `--every`-th
document of a corpus in the official parquet layout. For every document, the word lengths of
`jieba.cut` and of the segmenter must be equal: the script counts the documents where they differ
(and prints the first few). Times, in this one process, one after another on the same documents:
jieba.cut; the segmenter from empty memo tables ("cold": each block's route and HMM computed once,
as on a corpus that repeats nothing) and again with the tables filled ("warm": a corpus whose
sentences repeat, as prepare_scale.py's do). With the run's conditions (`conditions.py`).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
from conditions import Conditions  # noqa: E402
from prepare_scale import base_documents  # noqa: E402
from babylm_jax.core.atomic import atomic_write_json  # noqa: E402
from babylm_jax.corpus import segmenter  # noqa: E402


def parquet_documents(directory: pathlib.Path, every: int) -> list[str]:
    texts = [t for path in sorted(directory.glob("*.parquet")) for t in pq.read_table(path, columns=["text"])["text"].to_pylist()]
    return texts[::every]


def timed(fn, documents: list[str]) -> tuple[list[list[int]], float]:
    start = time.perf_counter()
    out = [fn(text) for text in documents]
    return out, time.perf_counter() - start


def compare(name: str, documents: list[str], conditions: Conditions) -> dict:
    jieba_lengths, _ = segmenter.make_word_lengths(False)
    conditions.probe()
    reference, jieba_s = timed(jieba_lengths, documents)
    fast = segmenter.FastJieba()
    cold, cold_s = timed(fast.lengths, documents)
    warm, warm_s = timed(fast.lengths, documents)
    differing = [i for i, (a, b) in enumerate(zip(reference, cold)) if a != b or b != warm[i]]
    for i in differing[:5]:
        print(f"  {name}: document {i} differs: {documents[i][:60]!r}")
    words = sum(map(len, reference))
    row = {"documents": len(documents), "characters": sum(map(len, documents)), "words": words,
           "differing_documents": len(differing), "jieba_s": round(jieba_s, 2), "cold_s": round(cold_s, 2),
           "warm_s": round(warm_s, 2), "cold_speedup": round(jieba_s / cold_s, 2), "warm_speedup": round(jieba_s / warm_s, 2)}
    print(f"{name}: {row['documents']:,} documents, {words:,} words, {len(differing)} differing; jieba.cut {jieba_s:.1f} s "
          f"({words / jieba_s:,.0f} words/s), segmenter cold {cold_s:.1f} s ({row['cold_speedup']:.2f}x), "
          f"warm {warm_s:.1f} s ({row['warm_speedup']:.2f}x)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=pathlib.Path, default=os.environ.get("BABYLM_DATA_DIR"))
    parser.add_argument("--parquet", type=pathlib.Path, help="a corpus/data folder of parquet files")
    parser.add_argument("--every", type=int, default=1, help="take every N-th parquet document")
    parser.add_argument("--out_json", type=pathlib.Path)
    args = parser.parse_args()
    conditions = Conditions.start()
    sets = {"base documents": [text for _, text in base_documents(args.data_dir)]}
    if args.parquet:
        sets[f"{args.parquet} (every {args.every})"] = parquet_documents(args.parquet, args.every)
    rows = {name: compare(name, documents, conditions) for name, documents in sets.items()}
    conditions.probe()
    lines: list[str] = []
    conditions.report(lines.append)
    print("\n".join(lines))
    if args.out_json:
        atomic_write_json(args.out_json, {"sets": rows, "load_after": os.getloadavg(), "conditions": lines})
    print(f"differing_documents: {sum(r['differing_documents'] for r in rows.values())}")


if __name__ == "__main__":
    main()
