"""The hanzi facts as a corpus source: written once into the workdir by `prepare`, keyed by what makes them.

    sources = run_sources(data_config, workdir)   # the facts (made here when missing), then data.corpus, data.paths
    counts = write_documents(path, infos, words, seed)   # the paragraphs as .jsonl, sized in jieba words

With `data.hanzi_facts.share` above 0, `<workdir>/data/hanzi_facts-<key>/` holds OUTPUT_FILE (one
paragraph of `hanzi_fact_writer.FactWriter` a line, field `data.text_field`) and MANIFEST (counts,
settings, package versions). `key` hashes the settings, the word budget, the text field, the
generator's version and the installed packages' versions: a change of any makes new facts; an
unchanged one reuses them, wherever the workdir lies. The facts are the first source, named
SOURCE_NAME: budget.json counts them on their own, the leakage check and filter read them as any
other text, and `data.max_documents` trims the corpus after them. Their size is `share x
data.word_budget` jieba words (counted with jieba's rule; `prepare` counts them again, as
everything), so they take that share of the budget and the corpus must fit in the rest.
"""
from __future__ import annotations

import functools
import json
import pathlib
from typing import Callable, Sequence

import tqdm

from babylm_jax.config.data import DataConfig, HanziFactsConfig
from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_dir
from babylm_jax.corpus import hanzi_lexicon, segmenter, sources
from babylm_jax.corpus.cache_keys import fingerprint
from babylm_jax.corpus.hanzi_fact_writer import FactWriter
from babylm_jax.corpus.hanzi_lexicon import CharInfo, Lexicon

OUTPUT_FILE = "hanzi_facts.jsonl"
MANIFEST = "manifest.json"
SOURCE_NAME = "hanzi_facts"  # the facts' source in budget.json and the corpus files' names
SOURCE_KEY = "data.hanzi_facts"
GENERATOR_VERSION = 1  # raise when hanzi_fact_writer words the facts differently: new facts, new caches


@functools.lru_cache(maxsize=1)
def _lexicon() -> Lexicon:
    return Lexicon()


def top_characters(lexicon: Lexicon, count: int) -> list[CharInfo]:
    """What is known about the `count` most frequent GB 2312 hanzi (jieba's dictionary) that have a reading."""
    return [info for info in map(lexicon.info, hanzi_lexicon.common_characters()) if info is not None][:count]


def write_documents(path: pathlib.Path, infos: Sequence[CharInfo], words_wanted: int | None, seed: int,
                    text_field: str = "text", progress: Callable[[int], None] = lambda n: None) -> dict:
    """Writes paragraphs to `path` (.jsonl, the text under `text_field`) until the next would pass
    `words_wanted` jieba words (None: one pass over the characters); returns the counts."""
    count, counter = segmenter.make_word_lengths(True)  # jieba's rule, in its faster exact form where it can
    total_words = documents = 0
    with open(path, "w", encoding="utf-8") as f:
        for text in FactWriter(infos, seed).documents():
            n = len(count(text))
            if words_wanted is not None and total_words + n > words_wanted:
                break
            f.write(json.dumps({text_field: text}, ensure_ascii=False) + "\n")
            total_words += n
            documents += 1
            progress(n if words_wanted is not None else 1)
            if words_wanted is None and documents == len(infos):
                break
    return {"documents": documents, "words": total_words, "characters": len(infos),
            "passes": documents / max(len(infos), 1), "seed": seed, "sources": Lexicon.versions(),
            "counter": f"len(list(jieba.cut(document))), by {counter}"}


def facts_words(settings: HanziFactsConfig, word_budget: int) -> int:
    """The facts' size in jieba words: their share of the budget."""
    return int(settings.share * word_budget)


def facts_key(data_config: DataConfig) -> str:
    """What makes the facts: their settings, the budget, the text field, the generator and the packages."""
    settings = data_config.hanzi_facts
    return fingerprint({"share": settings.share, "characters": settings.characters, "seed": settings.seed,
                        "words": facts_words(settings, data_config.word_budget), "text_field": data_config.text_field,
                        "generator": GENERATOR_VERSION, "packages": Lexicon.versions()})


def ensure_facts(data_config: DataConfig, workdir: str | pathlib.Path) -> pathlib.Path | None:
    """The folder of the run's facts under `<workdir>/data/`, written (atomically) where missing; None
    when `data.hanzi_facts.share` is 0."""
    settings = data_config.hanzi_facts
    if settings.share <= 0:
        return None
    folder = pathlib.Path(workdir) / rundir.DATA / f"{SOURCE_NAME}-{facts_key(data_config)}"
    if (folder / MANIFEST).is_file():
        return folder
    wanted = facts_words(settings, data_config.word_budget)
    infos = top_characters(_lexicon(), settings.characters)
    bar = tqdm.tqdm(total=wanted, unit="word", unit_scale=True, desc="hanzi facts", leave=False)
    with atomic_dir(folder, replace=True) as tmp:
        counts = write_documents(tmp / OUTPUT_FILE, infos, wanted, settings.seed, data_config.text_field,
                                 progress=bar.update)
        manifest = {**counts, "settings": {"share": settings.share, "characters": settings.characters,
                                           "word_budget": data_config.word_budget}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    bar.close()
    print(f"hanzi facts: {counts['words']:,} jieba words ({counts['documents']:,} paragraphs, {counts['passes']:.2f} "
          f"passes over {counts['characters']:,} characters; data.hanzi_facts.share={settings.share}) -> {folder}",
          flush=True)
    return folder


def run_sources(data_config: DataConfig, workdir: str | pathlib.Path) -> list[sources.Source]:
    """The run's sources: its hanzi facts first (made in the workdir when missing), then data.corpus and data.paths."""
    folder = ensure_facts(data_config, workdir)
    facts = [sources.Source(SOURCE_NAME, (folder / OUTPUT_FILE,), folder, SOURCE_KEY)] if folder else []
    return facts + sources.list_sources(data_config)
