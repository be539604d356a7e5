"""The official word budget: report (budget.json) and enforcement.

Words are `len(list(jieba.cut(document)))` summed over all documents of the corpus (jieba
0.42.1, default mode), counted in worker processes by `corpus_cache.count_corpus` (with jieba's rule,
exactly: corpus/segmenter.py), twice:
`words_raw` on each source document as read (what a reviewer applying the official rule to
the declared files gets: spaces and empty lines count as jieba words) and `words` on the
normalised text that is trained on. The budget is enforced on the larger. The held-out
evaluation share is counted too: it is part of the corpus; so are the generated hanzi facts
(`data.hanzi_facts`), a source of their own.
"""
from __future__ import annotations

import pathlib

import numpy as np

from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.corpus.corpus_cache import CorpusCache
from babylm_jax.corpus.hanzi_facts import SOURCE_NAME as FACTS_SOURCE


class BudgetError(ValueError):
    """The corpus holds more words than `data.word_budget` allows."""


def budget_report(cache: CorpusCache, word_budget: int, allow_over_budget: bool) -> dict:
    """Totals and per-source words, characters, lines and documents."""
    doc_source = cache.doc_array("doc_source")
    columns = {name: cache.doc_array(f"doc_{name}") for name in ("words", "chars", "lines")}

    def totals(selected: np.ndarray) -> dict:
        return {
            "words": int(columns["words"][selected].sum()),
            "characters": int(columns["chars"][selected].sum()),
            "lines": int(columns["lines"][selected].sum()),
            "documents": int(selected.sum()),
        }

    raw_words = cache.raw_words()
    report = totals(np.ones(len(doc_source), bool))
    report["words_raw"] = int(sum(raw_words.values()))
    report["budget_words"] = max(report["words"], report["words_raw"])
    over = report["budget_words"] > word_budget
    report.update(
        {
            "word_budget": int(word_budget),
            "over_budget": bool(over),
            "allowed_over_budget": bool(over and allow_over_budget),
            "counter": "len(list(jieba.cut(document))), jieba " + _jieba_version(),
            **cache.checks(),
            "leakage_dropped_lines": cache.dropped_lines(),
            "sources": {s.name: {**totals(doc_source == i), "words_raw": int(raw_words[i])}
                        for i, s in enumerate(cache.sources)},
        }
    )
    return report


def _jieba_version() -> str:
    """jieba's version, or a note where it is not installed: a prepared workdir's counts come from its
    counted shards, so train and a re-run prepare need jieba only for shards still to count."""
    try:
        import jieba
    except ImportError:
        return "not installed here (the counts were read from the counted shards)"
    return jieba.__version__


def enforce_budget(report: dict, path: pathlib.Path) -> None:
    """Writes `path` (budget.json) and refuses an over-budget corpus unless allowed."""
    atomic_write_json(path, report)
    if report["over_budget"] and not report["allowed_over_budget"]:
        facts = report["sources"].get(FACTS_SOURCE)
        of_which = f"; {facts['words_raw']:,} of them the hanzi facts, data.hanzi_facts.share" if facts else ""
        trim = (" (data.max_documents keeps the facts, which come first, and the corpus documents after them) or "
                "the facts' share") if facts else ""
        raise BudgetError(
            f"Corpus has {report['budget_words']:,} jieba words (as read: {report['words_raw']:,}; as trained on: "
            f"{report['words']:,}{of_which}), over data.word_budget={report['word_budget']:,} "
            f"(report: {path}). Shrink the corpus{trim}, or set data.allow_over_budget=True for an ablation."
        )
