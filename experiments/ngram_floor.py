"""The count-based floor: a character n-gram model with interpolated Kneser-Ney, scored on ZhoBLiMP.

    python experiments/ngram_floor.py --config configs/base.py --workdir runs/ngram \\
        --data_dir ../shared/data --orders 3 4 5

Counted on exactly the corpus a run of `--config` trains on (the project's own prepare
step: the same sources, normalisation and budget report, cached in `--workdir`), and
scored as the causal models are: a sentence's score is the sum of log p(character |
previous n-1 characters) after a sentence-start symbol, the end not read; accuracy per
UID, macro-averaged, ties counted correct (`eval.zero_shot.minimal_pairs.pair_accuracy`). Prints a
table and writes `<workdir>/ngram_floor.json`.

Interpolated Kneser-Ney (Chen & Goodman 1998) with one absolute discount per order
(D = n1 / (n1 + 2 n2) from the count-of-counts): the highest order uses counts, lower
orders continuation counts (how many distinct characters precede a history), and the
unigram level is interpolated with a uniform distribution over the characters seen plus
one unknown, so no character has zero probability.
"""
from __future__ import annotations

import argparse
import collections
import math
import pathlib
import time
from typing import Iterable, Sequence

from babylm_jax.config.schema import RunConfig
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.config.files import load_config_file
from babylm_jax.corpus.preparation import prepare_corpus
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.tasks import registry as tasks

START = "\x02"  # sentence-start symbol (never in the text)


class KneserNey:
    """Interpolated Kneser-Ney over characters; `logprob(history, char)` in nats."""

    def __init__(self, lines: Iterable[str], order: int):
        self.order = order
        counts = [collections.Counter() for _ in range(order + 1)]  # counts[k][(history of k-1, char)]
        for line in lines:
            padded = START * (order - 1) + line
            for i in range(order - 1, len(padded)):
                for k in range(1, order + 1):
                    counts[k][padded[i - k + 1 : i + 1]] += 1
        self.vocab = {gram for gram in counts[1] if gram != START} | {None}
        # Lower orders use continuation counts: distinct characters seen before the n-gram.
        self.counts = [collections.Counter() for _ in range(order + 1)]
        self.counts[order] = counts[order]
        for k in range(1, order):
            for gram in counts[k + 1]:
                self.counts[k][gram[1:]] += 1
        self.discount = [0.0] + [self._discount(self.counts[k]) for k in range(1, order + 1)]
        self.totals = [collections.Counter() for _ in range(order + 1)]  # per history: sum of counts
        self.types = [collections.Counter() for _ in range(order + 1)]  # per history: distinct followers
        for k in range(1, order + 1):
            for gram, c in self.counts[k].items():
                self.totals[k][gram[:-1]] += c
                self.types[k][gram[:-1]] += 1

    @staticmethod
    def _discount(counts: collections.Counter) -> float:
        of_counts = collections.Counter(counts.values())
        n1, n2 = of_counts.get(1, 0), of_counts.get(2, 0)
        return n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5

    def prob(self, history: str, char: str) -> float:
        p = 1.0 / len(self.vocab)  # uniform floor
        for k in range(1, self.order + 1):
            h = history[len(history) - (k - 1):] if k > 1 else ""
            total = self.totals[k].get(h, 0)
            if total == 0:
                continue  # unseen history: the lower-order estimate stands
            d = self.discount[k]
            p = max(self.counts[k].get(h + char, 0) - d, 0.0) / total + d * self.types[k][h] / total * p
        return p

    def sentence_logprob(self, sentence: str) -> float:
        padded = START * (self.order - 1) + sentence
        return sum(math.log(self.prob(padded[i - self.order + 1 : i], padded[i]))
                   for i in range(self.order - 1, len(padded)))


def corpus_lines(config_file: str, workdir: str) -> list[str]:
    """The lines of the corpus `config_file` trains on (prepared, and cached, in `workdir`)."""
    prepared = prepare_corpus(RunConfig.from_config(load_config_file(pathlib.Path(config_file))), workdir)
    return [line for text in prepared.corpus.iter_texts() for line in text.split("\n") if line]


def score_zhoblimp(model: KneserNey, pairs: Sequence[minimal_pairs.Pair]) -> float:
    good = [model.sentence_logprob(p.good) for p in pairs]
    bad = [model.sentence_logprob(p.bad) for p in pairs]
    return minimal_pairs.pair_accuracy(good, bad, [p.uid for p in pairs], [p.phenomenon for p in pairs])["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/base.py")
    parser.add_argument("--workdir", default="runs/ngram")
    parser.add_argument("--data_dir", required=True, help="folder holding zhoblimp/ (or the official layout)")
    parser.add_argument("--orders", type=int, nargs="+", default=[3, 4, 5])
    args = parser.parse_args()
    spec = tasks.get_task("zhoblimp")
    pairs = minimal_pairs.read_pairs(spec.find_files(args.data_dir), spec.pair_format)
    lines = corpus_lines(args.config, args.workdir)
    rows = []
    for order in args.orders:
        start = time.perf_counter()
        model = KneserNey(lines, order)
        accuracy = score_zhoblimp(model, pairs)
        rows.append({"order": order, "zhoblimp": accuracy, "characters": sum(map(len, lines)),
                     "seconds": round(time.perf_counter() - start, 1)})
        print(f"{order}-gram Kneser-Ney: ZhoBLiMP {accuracy:.4f} ({len(pairs):,} pairs, {rows[-1]['seconds']} s)",
              flush=True)
    atomic_write_json(pathlib.Path(args.workdir) / "ngram_floor.json", rows)
    print("| order | ZhoBLiMP |\n|---|---|\n" + "\n".join(f"| {r['order']} | {r['zhoblimp']:.4f} |" for r in rows))


if __name__ == "__main__":
    main()
