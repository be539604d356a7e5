"""Preparing the training data: budget check, tokenizer, token cache; each step skipped when cached.

    prepared = prepare_corpus(run, workdir)   # counts, trains/loads the tokenizer, tokenises

`run` is the run's typed config (`config.schema.RunConfig`): its `data`, and of its `model`
the vocabulary size and the family (the documents' framing).

Writes the run's hanzi facts where `data.hanzi_facts` asks for them (corpus/hanzi_facts.py),
`<workdir>/budget.json`, `<workdir>/tokenizer/` (the tokenizer the run trains with),
the caches under `<workdir>/data/` (counting/corpus_cache.py, token_cache.py) and `data/prepared.json`, which
names them: the other processes of a multi-process run open the prepared caches from it
(`open_prepared`) without reading the corpus's sources, which only process 0 needs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
from typing import Callable

from babylm_jax.core import outputs, rundir
from babylm_jax.core.atomic import atomic_dir, atomic_write_json
from babylm_jax.core.jsonl import read_json
from babylm_jax.corpus import budget
from babylm_jax.corpus.cache_integrity import FileHashes
from babylm_jax.corpus.sources import corpus_files, list_sources
from babylm_jax.corpus.hanzi_facts import ensure_facts, run_sources
from babylm_jax.corpus.hanzi_labels import check_head_labels
from babylm_jax.corpus.cache_keys import CACHE_VERSION, fingerprint, token_cache_key, tokenizer_key
from babylm_jax.config.data import DataConfig, TokenizerConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus.corpus_cache import CorpusCache, count_corpus
from babylm_jax.core.families import family_spec
from babylm_jax.core.progress import StageTimes
from babylm_jax.corpus.token_cache import TokenCache, cache_problem, tokenize_corpus
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.corpus.tokenizer_kinds import KINDS, load_tokenizer
from babylm_jax.corpus.tokenizer_training import check_vocab_room, required_characters, reserved_ids


@dataclasses.dataclass
class PreparedCorpus:
    """What `prepare` produces: the counted corpus, its budget report and the token cache."""

    corpus: CorpusCache
    budget_report: dict
    budget_path: pathlib.Path
    tokenizer: Tokenizer
    tokens: TokenCache
    times: StageTimes = dataclasses.field(default_factory=StageTimes)


def line_filter_from_config(data_config: DataConfig):
    """The leakage line filter when `data.leakage.drop` is on, else None."""
    if not data_config.leakage.drop:
        return None
    from babylm_jax.tasks import leakage

    return leakage.LeakDetector.from_data_dir(data_config.leakage.data_dir, data_config.leakage.ngram, data_config.normalize)


def _train_or_load_tokenizer(corpus: CorpusCache, key: str, tok_config: TokenizerConfig, vocab_size: int) -> pathlib.Path:
    directory = corpus.root / f"tokenizer-{key}"
    if (directory / "tokenizer.json").exists():
        return directory
    counts = corpus.char_counts()
    required = required_characters(tok_config.required_characters, counts)
    tokenizer = KINDS[tok_config.kind].from_corpus(corpus, counts, tok_config, vocab_size, required)
    with atomic_dir(directory) as tmp:
        tokenizer.save(tmp)
    return directory


def _publish_tokenizer(source: pathlib.Path, workdir: pathlib.Path, key: str, tokenizer: Tokenizer) -> None:
    """Copies the tokenizer to <workdir>/tokenizer/ unless the same one is already there; a tokenizer
    of other settings there is replaced with a line naming the old and the new one."""
    target = workdir / rundir.TOKENIZER
    stamp = target / "fingerprint.txt"
    if stamp.exists() and stamp.read_text() == key:
        return
    if target.exists():
        why, keep = _why_replaced(workdir, source.parent.name)
        print(f"tokenizer: {target} held {_described(target)} {why}; replaced by this run's {tokenizer.kind} "
              f"tokenizer of {tokenizer.vocab_size:,} ids ({keep})", flush=True)
    with atomic_dir(target, replace=True) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        (tmp / "fingerprint.txt").write_text(key)


def _why_replaced(workdir: pathlib.Path, corpus_name: str) -> tuple[str, str]:
    """Why the workdir's tokenizer is not this run's, and how to keep it: the corpus cache the last prepare
    recorded (data/prepared.json) is another, or else the tokenizer settings differ."""
    try:
        before = json.loads((workdir / rundir.PREPARED).read_text(encoding="utf-8")).get("corpus")
    except (OSError, ValueError, AttributeError):
        before = None
    if before and before != corpus_name:
        return (f"prepared from other corpus files or data.* reading settings (data/{before}, now data/{corpus_name})",
                "give data.corpus, data.paths and those settings as before to keep the old one")
    return "prepared with other data.tokenizer or model.vocab_size settings", "set those keys as before to keep the old one"


def _described(directory: pathlib.Path) -> str:
    """'a bpe tokenizer of 4,000 ids' as `directory`'s tokenizer.json says, or what is wrong with it."""
    try:
        meta = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        return f"a {meta['kind']} tokenizer of {meta['vocab_size']:,} ids"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"a tokenizer that could not be read ({type(error).__name__}: {error})"


def prepare_corpus(run: RunConfig, workdir: str | os.PathLike, times: StageTimes | None = None,
                   check_tokenizer: Callable[[Tokenizer], None] | None = None) -> PreparedCorpus:
    """Budget check, tokenizer training and tokenisation; each step skipped when cached.

    Reads `run.data`, and of `run.model` the vocabulary size and the family (the documents' framing).
    Each stage's wall time is added to `times`. `check_tokenizer` (a trained workdir's) may refuse the
    tokenizer made, before anything is tokenised or the workdir's tokenizer/ replaced.
    """
    workdir = pathlib.Path(workdir)
    with outputs.full_disk_errors(workdir, "the prepared data", lambda: _prepared_size(run.data),
                                  "free some space (or give a --workdir on another disk) and run the same command: "
                                  "the shards already done are kept"):
        return _prepare_corpus(run, workdir, times or StageTimes(), check_tokenizer)


PREPARED_PER_CORPUS_BYTE = 3  # a normalised copy of the text (shards) and its token ids, measured ~2.6


def _prepared_size(data_config: DataConfig) -> str:
    """What prepare writes for `data_config`'s corpus, roughly, in words."""
    corpus_bytes = sum(f.stat().st_size for source in list_sources(data_config) for f in source.files)
    return (f"about {corpus_bytes * PREPARED_PER_CORPUS_BYTE / 1e6:,.1f} MB ({PREPARED_PER_CORPUS_BYTE} times the "
            f"corpus's {corpus_bytes / 1e6:,.1f} MB; less for what is already prepared)")


def _prepare_corpus(run: RunConfig, workdir: pathlib.Path, times: StageTimes,
                    check_tokenizer: Callable[[Tokenizer], None] | None) -> PreparedCorpus:
    data_config = run.data
    vocab_size, framing = run.model.vocab_size, family_spec(run.model.family).framing
    tok_config = data_config.tokenizer  # room for the characters required whatever the corpus holds, before the count
    check_vocab_room(required_characters(tok_config.required_characters, {}), vocab_size,
                     reserved_ids(tok_config.byte_fallback))
    line_filter = line_filter_from_config(data_config)
    if data_config.hanzi_facts.share > 0:
        with times.stage("hanzi facts"):
            ensure_facts(data_config, workdir)  # written the first time, reused after
    with times.stage("count words"):
        hashes = FileHashes(workdir / rundir.FILE_HASHES)
        sources = run_sources(data_config, workdir)
        files = corpus_files(sources, hashes)
        corpus = count_corpus(data_config, workdir / rundir.DATA, line_filter, files, sources)
        hashes.save()
    with times.stage("budget"):
        report = budget.budget_report(corpus, data_config.word_budget, data_config.allow_over_budget)
    budget_path = workdir / rundir.BUDGET
    budget.enforce_budget(report, budget_path)
    key = tokenizer_key(corpus.root.name, data_config.tokenizer, vocab_size)
    with times.stage("tokenizer"):
        tokenizer_dir = _train_or_load_tokenizer(corpus, key, data_config.tokenizer, vocab_size)
    tokenizer = load_tokenizer(tokenizer_dir)
    if tokenizer.vocab_size > vocab_size:
        raise ValueError(f"Tokenizer has {tokenizer.vocab_size} ids, more than model.vocab_size={vocab_size}")
    check_head_labels(run.train.aux_heads, tokenizer)  # auxiliary heads need hanzi in the vocabulary, before tokenising
    if check_tokenizer is not None:
        check_tokenizer(tokenizer)
    with times.stage("tokenise"):
        tokens = tokenize_corpus(corpus, tokenizer_dir, token_cache_key(key, framing), framing, data_config.num_workers)
    _publish_tokenizer(tokenizer_dir, workdir, key, tokenizer)
    atomic_write_json(workdir / rundir.PREPARED, {
        "settings": _settings_key(run), "corpus": corpus.root.name, "shards": len(corpus.shard_dirs),
        "tokenizer": tokenizer_dir.name, "tokens": tokens.directory.name})
    return PreparedCorpus(corpus, report, budget_path, tokenizer, tokens, times)


def _settings_key(run: RunConfig) -> str:
    """Every setting prepare reads, without the sources' sizes and dates (only process 0 reads them)."""
    return fingerprint({"version": CACHE_VERSION, "data": dataclasses.asdict(run.data), "vocab_size": run.model.vocab_size,
                        "framing": dataclasses.asdict(family_spec(run.model.family).framing)})


def open_prepared(run: RunConfig, workdir: str | os.PathLike) -> PreparedCorpus:
    """The caches that `prepare_corpus` made in `workdir` for `run`'s settings, opened without the
    corpus's sources; each cache checked against the sizes and sha256 it recorded."""
    workdir = pathlib.Path(workdir)
    path = workdir / rundir.PREPARED
    record = read_json(path, "process 0 writes it: every process must see the same --workdir (a folder all "
                             "hosts mount, or a bucket: gs://...)")
    if record.get("settings") != _settings_key(run):
        raise ValueError(f"{path} names caches prepared with other data settings than this run's: every process "
                         "must run the same config")
    root = workdir / rundir.DATA / record["corpus"]
    problem = cache_problem(root / record["tokens"])
    if problem is not None:
        raise ValueError(f"the prepared token cache is damaged: {problem}; prepare the data again")
    corpus = CorpusCache(root, [], [root / "shards" / f"{i:05d}" for i in range(record["shards"])])
    budget_path = workdir / rundir.BUDGET
    report = read_json(budget_path, "prepare the data again (process 0 writes it)")
    return PreparedCorpus(corpus, report, budget_path, load_tokenizer(root / record["tokenizer"]),
                          TokenCache.load(root / record["tokens"]))
