"""Training data for the trainer: prepare when needed (tokens/preparation.py), then a grain iterator of packed batches.

    data = build_train_data(run, workdir, process_index=p, process_count=P)   # run: a RunConfig
    batch = next(data.train_iterator)   # numpy dict, this process's rows of the global batch

Batches hold `tokens`, `segment_ids` (1.. per piece, 0 = padding), `positions` (restart at 0
at each piece, see packing.py), `words` (jieba words each row covers, pro rata per piece)
and, with `data.whole_word_masking`, `word_starts`; train batches also `batch_words`, the words of
the whole global batch, which every process computes from the global batch's row ids (no exchange
between hosts). Row r of the global batch of a step is
row r of the concatenation of the per-process batches of processes 0..P-1.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import grain
import numpy as np

from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.corpus import packing
from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus.corpus_cache import CorpusCache
from babylm_jax.corpus.preparation import PreparedCorpus, prepare_corpus
from babylm_jax.corpus.token_cache import TokenCache
from babylm_jax.corpus.tokenizer import Tokenizer

EVAL_SPLIT_SEED = 20250101  # fixed: the held-out documents do not depend on train.seed


@dataclasses.dataclass
class TrainData:
    tokenizer: Tokenizer
    train_iterator: Any  # grain DatasetIterator: get_state()/set_state(), infinite
    eval_batches: list[dict]
    stats: dict


def split_documents(num_documents: int, eval_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(train ids in corpus order, eval ids in corpus order); the eval draw uses a fixed seed."""
    num_eval = int(round(eval_share * num_documents))
    if eval_share > 0 and num_documents > 1:
        num_eval = max(num_eval, 1)
    chosen = np.zeros(num_documents, bool)
    chosen[np.random.default_rng(EVAL_SPLIT_SEED).permutation(num_documents)[:num_eval]] = True
    return np.flatnonzero(~chosen), np.flatnonzero(chosen)


@dataclasses.dataclass(frozen=True)
class _ProcessRows:
    """Picks this process's share of a global batch of row ids, then builds it."""

    builder: packing.BatchBuilder
    process_index: int
    rows_per_process: int
    row_words: np.ndarray | None = None  # [rows] words of every row: adds `batch_words`

    def __call__(self, rows_B: np.ndarray) -> dict:
        start = self.process_index * self.rows_per_process
        batch = self.builder(rows_B[start : start + self.rows_per_process])
        if self.row_words is not None:
            batch["batch_words"] = np.sum(self.row_words[rows_B])
        return batch


def _split_stats(tokens: TokenCache, corpus: CorpusCache, doc_ids: np.ndarray) -> dict:
    lengths = tokens.doc_offsets[doc_ids + 1] - tokens.doc_offsets[doc_ids]
    return {
        "documents": int(len(doc_ids)),
        "characters": int(corpus.doc_array("doc_chars")[doc_ids].sum()),
        "tokens": int(lengths.sum()),
        "words": int(tokens.doc_words[doc_ids].sum()),
    }


def build_train_data(run: RunConfig, workdir: str | os.PathLike, *, process_index: int = 0,
                     process_count: int = 1, prepared: PreparedCorpus | None = None) -> TrainData:
    """The tokenizer, train iterator and eval batches of `prepared` (default: the corpus prepared
    now, when needed)."""
    batch_size, seq_len = run.train.batch_size, run.train.seq_len
    if batch_size % process_count:
        raise ValueError(f"train.batch_size={batch_size} is not divisible by the {process_count} processes")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, {process_count})")
    data_config = run.data
    prepared = prepared or prepare_corpus(run, workdir)
    tokens = prepared.tokens
    train_ids, eval_ids = split_documents(tokens.num_documents, data_config.eval_share)
    packing_kind, whole_word = data_config.packing, data_config.whole_word_masking
    rows_per_process = batch_size // process_count

    train_layout = packing.make_layout(tokens, train_ids, seq_len, packing_kind, keep_partial=False)
    if train_layout.num_rows == 0:
        raise ValueError(f"Training corpus too small: fewer than train.seq_len={seq_len} tokens")
    if batch_size > train_layout.num_rows:  # checked before any batch is built: a huge one would fill the memory
        raise ValueError(f"train.batch_size={batch_size:,} is more rows than the training corpus holds "
                         f"({train_layout.num_rows:,} rows of train.seq_len={seq_len} tokens): every batch would "
                         "repeat the whole corpus; lower train.batch_size or add text")
    builder = packing.BatchBuilder(tokens, train_layout, whole_word)
    dataset = (
        grain.MapDataset.range(train_layout.num_rows)
        .shuffle(seed=run.train.seed)
        .repeat(None)
        .batch(batch_size)
        .map(_ProcessRows(builder, process_index, rows_per_process, builder.all_row_words()))
    )
    train_iterator = iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=data_config.reader_threads, prefetch_buffer_size=8)))

    eval_batches = []
    if len(eval_ids):
        eval_layout = packing.make_layout(tokens, eval_ids, seq_len, packing_kind, keep_partial=True)
        eval_builder = _ProcessRows(packing.BatchBuilder(tokens, eval_layout, whole_word), process_index, rows_per_process)
        for start in range(0, eval_layout.num_rows, batch_size):
            rows = np.arange(start, start + batch_size)
            eval_batches.append(eval_builder(np.where(rows < eval_layout.num_rows, rows, -1)))

    stats = {
        "train": _split_stats(tokens, prepared.corpus, train_ids),
        "eval": _split_stats(tokens, prepared.corpus, eval_ids),
        "train_rows": train_layout.num_rows,
        "eval_batches": len(eval_batches),
        "packing": packing_kind,
        "tokenizer": {"kind": prepared.tokenizer.kind, "vocab_size": prepared.tokenizer.vocab_size},
        "budget": {key: prepared.budget_report[key] for key in ("words", "words_raw", "over_budget")},
        "budget_report": str(prepared.budget_path),
        "token_cache": str(tokens.directory),
    }
    if process_index == 0:
        atomic_write_json(pathlib.Path(workdir) / rundir.DATA_STATS, stats)
    return TrainData(prepared.tokenizer, train_iterator, eval_batches, stats)
