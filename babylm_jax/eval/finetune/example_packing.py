"""Fine-tuning batches: whole input rows packed into rows of `row_len` tokens with segment ids.

An example has one input row (classification) or one per option (multiple choice); each
input row becomes a segment of a packed row: its own segment id, positions from 0, so the
attention stays within it (`model.attention.Mask`) and the head reads its own first token
(encoders) or last token (causal models).

- Training (`TrainPlan`): a batch holds exactly `batch_size` examples drawn in a shuffled
  order, and the last partial batch is dropped, as the official trainer's
  DataLoader(shuffle=True, drop_last=True) does (a split smaller than one batch gives one
  batch of all of it). Its segments are placed first-fit decreasing; row counts come from a
  few shapes, all known before the first step.
- Evaluation: one shape for the whole split, `num_rows` rows and `num_slots` example slots,
  filled with examples in decreasing length until either runs out.

A batch (numpy): tokens, segments, positions [R, L] (segment 0 = padding); pool [E, C]: the
flat index `row * L + position` of each input row's pooled token (0 for an absent option);
present [E, C]; labels [E]; index [E] (the example's index in the split; -1 = empty slot).
"""
from __future__ import annotations

import collections
import math
from typing import Iterator

import numpy as np

from babylm_jax.eval.finetune.clue import EncodedSplit

Batch = dict[str, np.ndarray]


class _Rows:
    """Rows of `row_len` tokens being filled first-fit; at most `limit` rows (None = no limit)."""

    def __init__(self, row_len: int, limit: int | None = None):
        self.row_len, self.limit = row_len, limit
        self.used: list[int] = []  # tokens used per row
        self.placed: list[tuple[int, int, list[int]]] = []  # (row, offset, token ids) per segment

    def fit(self, segments: list[list[int]]) -> list[int] | None:
        """Places `segments`, longest first; their indices in `placed`, or None (nothing placed) if they do not fit."""
        used, placed = list(self.used), {}
        for i in sorted(range(len(segments)), key=lambda i: len(segments[i]), reverse=True):
            size = len(segments[i])
            row = next((r for r, u in enumerate(used) if u + size <= self.row_len), None)
            if row is None:
                if self.limit is not None and len(used) >= self.limit:
                    return None
                row = len(used)
                used.append(0)
            placed[i] = (row, used[row], segments[i])
            used[row] += size
        self.used = used
        start = len(self.placed)
        self.placed += [placed[i] for i in range(len(segments))]
        return list(range(start, start + len(segments)))


def _batch(split: EncodedSplit, members: list[int], rows: _Rows, pools: list[list[int]], num_rows: int,
           num_slots: int, num_choices: int, last: bool) -> Batch:
    """The arrays of one batch: `members` (example indices) whose segments `rows` placed (`pools[k]`: theirs)."""
    length = rows.row_len
    tokens = np.zeros((num_rows, length), np.int32)
    segments = np.zeros((num_rows, length), np.int32)
    positions = np.zeros((num_rows, length), np.int32)
    next_segment = [1] * num_rows
    flat_pool = []
    for row, offset, ids in rows.placed:
        end = offset + len(ids)
        tokens[row, offset:end] = ids
        segments[row, offset:end] = next_segment[row]
        positions[row, offset:end] = np.arange(len(ids))
        next_segment[row] += 1
        flat_pool.append(row * length + (end - 1 if last else offset))
    pool = np.zeros((num_slots, num_choices), np.int32)
    present = np.zeros((num_slots, num_choices), bool)
    labels = np.zeros((num_slots,), np.int32)
    index = np.full((num_slots,), -1, np.int32)
    for slot, (i, placed) in enumerate(zip(members, pools)):
        pool[slot, : len(placed)] = [flat_pool[p] for p in placed]
        present[slot, : len(placed)] = True
        labels[slot], index[slot] = split.labels[i], i
    return {"tokens": tokens, "segments": segments, "positions": positions, "pool": pool, "present": present,
            "labels": labels, "index": index}


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    """Training batches per epoch: whole batches only, or one batch of a split smaller than a batch."""
    return max(num_examples // batch_size, 1)


class TrainPlan:
    """Every epoch's batches, fixed before step 1: which examples each step trains on and its row count.

    Epoch e draws its order from `np.random.default_rng([seed, e])`. A step's row count is the
    rows first-fit decreasing needs, rounded up to `rows_multiple`; counts that fewer than
    `min_share` of the steps need are padded up to the next larger one in use, so a task
    compiles a handful of shapes (`shapes`), all known before training starts."""

    def __init__(self, split: EncodedSplit, batch_size: int, row_len: int, rows_multiple: int, seed: int,
                 epochs: int, min_share: float = 0.01):
        self.split, self.batch_size, self.row_len = split, batch_size, row_len
        self.members: list[list[list[int]]] = []  # epoch -> step -> example indices
        needed = []
        for epoch in range(epochs):
            order = np.random.default_rng([seed, epoch]).permutation(len(split.ids))
            steps = [sorted((int(i) for i in order[k * batch_size:(k + 1) * batch_size]),  # first-fit decreasing
                            key=lambda i: sum(len(r) for r in split.ids[i]), reverse=True)
                     for k in range(steps_per_epoch(len(order), batch_size))]
            self.members.append(steps)
            needed += [math.ceil(len(self._rows(m)[0].used) / rows_multiple) * rows_multiple for m in steps]
        counts = collections.Counter(needed)
        self.shapes = sorted(r for r, n in counts.items() if n >= min_share * len(needed) or r == max(counts))

    def _rows(self, members: list[int]) -> tuple[_Rows, list[list[int]]]:
        rows = _Rows(self.row_len)
        return rows, [rows.fit(self.split.ids[i]) for i in members]

    def _shape(self, used: int) -> int:
        return next(r for r in self.shapes if r >= used)

    def batches(self, epoch: int, num_choices: int, last: bool) -> Iterator[Batch]:
        """Epoch `epoch`'s batches, built as they are consumed (the host packs the next while the device runs a step)."""
        for members in self.members[epoch]:
            rows, pools = self._rows(members)
            yield _batch(self.split, members, rows, pools, self._shape(len(rows.used)), self.batch_size, num_choices,
                         last)


def eval_batches(split: EncodedSplit, row_len: int, num_rows: int, num_slots: int, num_choices: int,
                 last: bool) -> list[Batch]:
    """Every example once, in batches of one fixed shape ([num_rows, row_len], `num_slots` slots)."""
    if num_rows < num_choices:
        raise ValueError(f"{num_rows} rows per evaluation batch cannot hold an example of {num_choices} input rows")
    order = sorted(range(len(split.ids)), key=lambda i: sum(len(r) for r in split.ids[i]), reverse=True)
    batches: list[Batch] = []
    rows, members, pools = _Rows(row_len, num_rows), [], []
    for i in order:
        placed = rows.fit(split.ids[i]) if len(members) < num_slots else None
        if placed is None:
            batches.append(_batch(split, members, rows, pools, num_rows, num_slots, num_choices, last))
            rows, members, pools = _Rows(row_len, num_rows), [], []
            placed = rows.fit(split.ids[i])
        members.append(i)
        pools.append(placed)
    if members:
        batches.append(_batch(split, members, rows, pools, num_rows, num_slots, num_choices, last))
    return batches


def padded_tokens(batches: list[Batch]) -> tuple[int, int]:
    """(real tokens, row tokens computed) over `batches`."""
    return (sum(int((b["segments"] > 0).sum()) for b in batches), sum(b["tokens"].size for b in batches))
