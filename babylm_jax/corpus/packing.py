"""Packing documents into fixed-length rows, and rows into numpy batches.

A `RowLayout` lists each row's pieces: contiguous token ranges of one document. Row r owns
pieces `row_offsets[r]:row_offsets[r+1]`, in order. Two layouts:
- "concat": documents concatenated and split every `seq_len` tokens. A document cut at a
  row boundary continues in the next row as a new segment whose positions RESTART at 0
  (so positions never exceed seq_len; with RoPE only relative positions matter anyway).
  Training drops the final partial row; evaluation keeps it padded.
- "first_fit": documents longer than `seq_len` are split into seq_len chunks; each chunk
  goes into the first row with room for it (rows end padded with segment 0).
Within a row, pieces get segment ids 1, 2, 3, ... and positions 0..len-1.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from babylm_jax.config.data import PACKINGS

if TYPE_CHECKING:
    from babylm_jax.corpus.token_cache import TokenCache



@dataclasses.dataclass
class RowLayout:
    seq_len: int
    piece_start: np.ndarray  # [P] int64: first token (index into the cache's flat tokens)
    piece_len: np.ndarray  # [P] int64
    piece_doc: np.ndarray  # [P] int64: document id
    row_offsets: np.ndarray  # [rows + 1] int64 into the piece arrays

    @property
    def num_rows(self) -> int:
        return len(self.row_offsets) - 1


def concat_layout(cache: TokenCache, doc_ids: np.ndarray, seq_len: int, keep_partial: bool) -> RowLayout:
    """Concatenate-and-split over `doc_ids` in the given order."""
    starts = cache.doc_offsets[doc_ids]
    lengths = cache.doc_offsets[doc_ids + 1] - starts
    stream_end = np.cumsum(lengths)
    total = int(stream_end[-1]) if len(lengths) else 0
    num_rows = -(-total // seq_len) if keep_partial else total // seq_len
    limit = num_rows * seq_len
    # Cut points in the concatenated stream: every document start and every row start.
    doc_begin = stream_end - lengths
    cuts = _sorted_union(doc_begin[doc_begin < limit], np.arange(0, limit, seq_len))
    ends = np.append(cuts[1:], min(limit, total))
    keep = ends > cuts
    cuts, ends = cuts[keep], ends[keep]
    doc_index = np.searchsorted(stream_end, cuts, side="right")
    piece_start = starts[doc_index] + (cuts - doc_begin[doc_index])
    piece_row = cuts // seq_len
    row_offsets = np.searchsorted(piece_row, np.arange(num_rows + 1), side="left")
    return RowLayout(seq_len, piece_start.astype(np.int64), (ends - cuts).astype(np.int64), doc_ids[doc_index].astype(np.int64), row_offsets.astype(np.int64))


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.union1d` of two sorted arrays, by a merge (np.unique's hashing takes seconds at millions)."""
    merged = np.sort(np.concatenate([a, b]), kind="stable")
    return merged[np.concatenate([[True], merged[1:] != merged[:-1]])] if len(merged) else merged


class _MaxTree:
    """Segment tree over row free space: find the first row with at least n tokens free."""

    def __init__(self, capacity: int, seq_len: int):
        self.size = 1
        while self.size < capacity:
            self.size *= 2
        self.tree = np.full(2 * self.size, seq_len, dtype=np.int64).tolist()

    def first_fit(self, n: int) -> int:
        tree = self.tree
        i = 1
        while i < self.size:
            i = 2 * i if tree[2 * i] >= n else 2 * i + 1
        return i - self.size

    def take(self, row: int, n: int) -> None:
        tree = self.tree
        i = row + self.size
        tree[i] -= n
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2


def first_fit_layout(cache: TokenCache, doc_ids: np.ndarray, seq_len: int) -> RowLayout:
    """First-fit packing of seq_len-sized document chunks, in `doc_ids` order."""
    starts = cache.doc_offsets[doc_ids]
    lengths = cache.doc_offsets[doc_ids + 1] - starts
    chunks = -(-lengths // seq_len)
    chunk_doc = np.repeat(np.arange(len(doc_ids)), chunks)
    chunk_index = np.arange(len(chunk_doc)) - np.repeat(np.cumsum(chunks) - chunks, chunks)
    chunk_start = starts[chunk_doc] + chunk_index * seq_len
    chunk_len = np.minimum(seq_len, lengths[chunk_doc] - chunk_index * seq_len)
    tree = _MaxTree(max(len(chunk_len), 1), seq_len)
    chunk_row = np.empty(len(chunk_len), np.int64)
    used_rows = 0
    for i, n in enumerate(chunk_len.tolist()):
        row = tree.first_fit(n)
        tree.take(row, n)
        chunk_row[i] = row
        used_rows = max(used_rows, row + 1)
    order = np.argsort(chunk_row, kind="stable")
    row_offsets = np.searchsorted(chunk_row[order], np.arange(used_rows + 1), side="left")
    return RowLayout(seq_len, chunk_start[order], chunk_len[order], doc_ids[chunk_doc[order]].astype(np.int64), row_offsets.astype(np.int64))


def make_layout(cache: TokenCache, doc_ids: np.ndarray, seq_len: int, packing: str, keep_partial: bool) -> RowLayout:
    if packing == "concat":
        return concat_layout(cache, doc_ids, seq_len, keep_partial)
    if packing == "first_fit":
        return first_fit_layout(cache, doc_ids, seq_len)
    raise ValueError(f"data.packing must be one of {PACKINGS}, got {packing!r}")


@dataclasses.dataclass
class BatchBuilder:
    """Turns row ids (-1 = an empty padding row) into a numpy batch dict."""

    cache: TokenCache
    layout: RowLayout
    whole_word_masking: bool

    def __call__(self, rows_B: np.ndarray) -> dict:
        layout, seq_len = self.layout, self.layout.seq_len
        rows_B = np.asarray(rows_B, dtype=np.int64)
        batch_size = len(rows_B)
        real = rows_B >= 0
        first = np.where(real, layout.row_offsets[np.maximum(rows_B, 0)], 0)
        count = np.where(real, layout.row_offsets[np.maximum(rows_B, 0) + 1] - first, 0)
        # Pieces of all rows, in order; their batch row and rank within the row.
        piece_batch_row = np.repeat(np.arange(batch_size), count)
        rank = np.arange(len(piece_batch_row)) - np.repeat(np.cumsum(count) - count, count)
        pieces = np.repeat(first, count) + rank
        lengths = layout.piece_len[pieces]
        in_row_start = _exclusive_cumsum_per_group(lengths, count)
        # Tokens of all pieces.
        token_piece = np.repeat(np.arange(len(pieces)), lengths)
        within = np.arange(len(token_piece)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        source = layout.piece_start[pieces][token_piece] + within
        dest = piece_batch_row[token_piece] * seq_len + in_row_start[token_piece] + within
        batch = {
            "tokens": np.zeros(batch_size * seq_len, np.int32),
            "segment_ids": np.zeros(batch_size * seq_len, np.int32),
            "positions": np.zeros(batch_size * seq_len, np.int32),
        }
        batch["tokens"][dest] = self.cache.tokens[source]
        batch["segment_ids"][dest] = (rank + 1)[token_piece]
        batch["positions"][dest] = within
        if self.whole_word_masking:
            batch["word_starts"] = np.zeros(batch_size * seq_len, np.int32)
            batch["word_starts"][dest] = self.cache.word_starts[source]
        batch = {k: v.reshape(batch_size, seq_len) for k, v in batch.items()}
        batch["words"] = _row_words(self.cache, layout, pieces, piece_batch_row, batch_size)
        return batch

    def all_row_words(self) -> np.ndarray:
        """[rows] float32: the jieba words of every row of the layout, equal to `words` of a batch
        holding it (the same pieces summed in the same order)."""
        layout = self.layout
        pieces = np.arange(len(layout.piece_len))
        piece_row = np.repeat(np.arange(layout.num_rows), np.diff(layout.row_offsets))
        return _row_words(self.cache, layout, pieces, piece_row, layout.num_rows)


def _row_words(cache: "TokenCache", layout: RowLayout, pieces: np.ndarray, piece_row: np.ndarray,
               num_rows: int) -> np.ndarray:
    """[num_rows] float32: each row's share of its documents' jieba words, pro rata per piece."""
    docs = layout.piece_doc[pieces]
    doc_tokens = cache.doc_offsets[docs + 1] - cache.doc_offsets[docs]
    share = cache.doc_words[docs] * layout.piece_len[pieces] / np.maximum(doc_tokens, 1)
    return np.bincount(piece_row, weights=share, minlength=num_rows).astype(np.float32)


def _exclusive_cumsum_per_group(values: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """Running sum of `values` before each element, restarting at each group (groups consecutive)."""
    exclusive = np.cumsum(values) - values
    nonempty = group_sizes[group_sizes > 0]
    group_first = np.cumsum(nonempty) - nonempty
    return exclusive - np.repeat(exclusive[group_first], nonempty)
