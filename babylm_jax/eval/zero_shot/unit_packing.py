"""Sentences as units packed into rows of a few static shapes, with the reads each row's scores come from.

Sentences come framed as their family trains (`core.families`; `Framing.scoring_input`):
- causal: a unit is `[bos] + ids`; every position reads the next token of its unit.
- pll: a unit is one masked copy of `[cls] + ids + [sep]` (token i -> mask); one read at i.
  With `within_word_l2r`, the later tokens of the same word are masked too (Kauf & Ivanova 2023).
- mntp (hybrid, GPT-BERT): as pll, but the masked token at i is read at position i-1.

    groups = make_units(sentences, Scoring.CAUSAL, mask_id)         # units grouped by length
    rows = pack_units(groups, len(sentences), 128, 512, True)  # [N, R] inputs and [N, K] reads per shape
"""
from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple, Sequence, TypeVar

import numpy as np

from babylm_jax.core.families import Scoring


class _UnitArrays(NamedTuple):
    """The units of one length m: tokens [U, m], reads [U, r] as (offset, target), sentence id [U]."""

    tokens: np.ndarray
    read_offsets: np.ndarray
    read_targets: np.ndarray
    sentence: np.ndarray


@dataclasses.dataclass
class _Units:
    """Units of one length m, gathered a group of sentences at a time (`arrays` joins them)."""

    tokens: list[np.ndarray] = dataclasses.field(default_factory=list)
    read_offsets: list[np.ndarray] = dataclasses.field(default_factory=list)
    read_targets: list[np.ndarray] = dataclasses.field(default_factory=list)
    sentence: list[np.ndarray] = dataclasses.field(default_factory=list)

    def add(self, tokens: np.ndarray, offsets: np.ndarray, targets: np.ndarray, sentence: np.ndarray) -> None:
        self.tokens.append(tokens)
        self.read_offsets.append(offsets)
        self.read_targets.append(targets)
        self.sentence.append(sentence)

    def arrays(self) -> _UnitArrays:
        return _UnitArrays(np.concatenate(self.tokens), np.concatenate(self.read_offsets),
                           np.concatenate(self.read_targets), np.concatenate(self.sentence))


def make_units(
    sentences: Sequence[Sequence[int]], variant: Scoring, mask_id: int, word_ids: Sequence[Sequence[int]] | None = None
) -> dict[int, _Units]:
    """Units grouped by length. `sentences` are model inputs (`Framing.scoring_input`)."""
    groups: dict[int, _Units] = collections.defaultdict(_Units)
    by_length: dict[int, list[int]] = collections.defaultdict(list)
    for s, tokens in enumerate(sentences):
        by_length[len(tokens)].append(s)
    for m, index in by_length.items():
        tokens_Sxm = np.asarray([sentences[s] for s in index], dtype=np.int32).reshape(len(index), m)
        sentence_S = np.asarray(index, dtype=np.int32)
        if variant is Scoring.CAUSAL:
            if m < 2:
                continue
            offsets = np.broadcast_to(np.arange(m - 1, dtype=np.int32), (len(index), m - 1))
            groups[m].add(tokens_Sxm, offsets, tokens_Sxm[:, 1:], sentence_S)
            continue
        n = m - 2  # real tokens between [cls] and [sep]
        if n < 1:
            continue
        copies_SxnXm = np.repeat(tokens_Sxm[:, None, :], n, axis=1)
        positions_n = np.arange(1, n + 1)
        if word_ids is None:
            copies_SxnXm[:, positions_n - 1, positions_n] = mask_id
        else:
            words_Sxn = np.asarray([word_ids[s] for s in index], dtype=np.int64).reshape(len(index), n)
            same_word_Sxnxn = words_Sxn[:, :, None] == words_Sxn[:, None, :]
            later_or_self_nxn = positions_n[None, :] >= positions_n[:, None]
            masked_Sxnxn = same_word_Sxnxn & later_or_self_nxn
            copies_SxnXm[:, :, 1:-1] = np.where(masked_Sxnxn, mask_id, copies_SxnXm[:, :, 1:-1])
        read = positions_n - 1 if variant is Scoring.MNTP else positions_n
        groups[m].add(
            copies_SxnXm.reshape(-1, m),
            np.tile(read, len(index))[:, None].astype(np.int32),
            tokens_Sxm[:, 1:-1].reshape(-1, 1),
            np.repeat(sentence_S, n),
        )
    return groups


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, int(x) - 1).bit_length()


@dataclasses.dataclass
class Rows:
    """Packed rows of one static shape: [N, R] inputs and [N, K] reads."""

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    read_pos: np.ndarray
    read_target: np.ndarray
    read_sentence: np.ndarray  # num_sentences (a dummy slot) for padding reads

    @classmethod
    def empty(cls, num_rows: int, row_len: int, reads_per_row: int, num_sentences: int) -> Rows:
        """Rows of padding only: segment id 0 everywhere, every read on the dummy sentence `num_sentences`."""
        inputs, reads = np.zeros((num_rows, row_len), np.int32), np.zeros((num_rows, reads_per_row), np.int32)
        return cls(inputs, inputs.copy(), inputs.copy(), reads, reads.copy(),
                   np.full((num_rows, reads_per_row), num_sentences, np.int32))

    @property
    def real_tokens(self) -> int:
        return int((self.segment_ids > 0).sum())


RowLayout = list[tuple[int, int, int]]  # one row's blocks of units: (unit length m, first unit, unit count)


def _plan_rows(lengths_count: dict[int, int], row_len: int) -> list[list[tuple[int, int]]]:
    """Greedy packing by length counts: each row is a list of (length, count) blocks."""
    remaining = dict(lengths_count)
    lengths = sorted(remaining, reverse=True)
    rows = []
    while any(remaining.values()):
        space, blocks = row_len, []
        for m in lengths:
            if remaining[m] and m <= space:
                c = min(remaining[m], space // m)
                blocks.append((m, c))
                remaining[m] -= c
                space -= c * m
        rows.append(blocks)
    return rows


def pack_units(
    groups: dict[int, _Units], num_sentences: int, row_len: int, max_len: int, causal_reads: bool
) -> list[Rows]:
    """Packs units into rows of a few static shapes, keyed by (R, K)."""
    units = {m: g.arrays() for m, g in groups.items()}
    short = {m: len(u.tokens) for m, u in units.items() if m <= row_len}
    long_lengths = sorted(m for m in units if m > row_len)
    too_long = [m for m in long_lengths if m > max_len]
    if too_long:
        raise ValueError(f"a sentence needs {max(too_long)} tokens, more than the model's max_len={max_len}")
    layouts: list[tuple[int, list[RowLayout]]] = []  # (row length, its rows) per shape family
    taken = collections.Counter()
    short_rows = []
    for blocks in _plan_rows(short, row_len):
        row = []
        for m, c in blocks:
            row.append((m, taken[m], c))
            taken[m] += c
        short_rows.append(row)
    layouts.append((row_len, short_rows))
    for m in long_lengths:
        layouts.append((next_pow2(m), [[(m, u, 1)] for u in range(len(units[m].tokens))]))

    shapes: dict[tuple[int, int], list[Rows]] = collections.defaultdict(list)
    for r, rows in layouts:
        if not rows:
            continue
        if causal_reads:  # every position may read the next token: K = R
            shapes[(r, r)].append(_fill_rows(rows, units, r, r, num_sentences, causal_reads))
            continue
        by_k = collections.defaultdict(list)  # one read per unit: K = units per row, bucketed
        for row in rows:
            by_k[max(2, next_pow2(sum(c for _, _, c in row)))].append(row)
        for k, chosen in by_k.items():
            shapes[(r, k)].append(_fill_rows(chosen, units, r, k, num_sentences, causal_reads))
    return [_concatenate(parts) for parts in shapes.values()]


@dataclasses.dataclass(frozen=True)
class _Placed:
    """Where units of one length m go, one entry per unit: its index among them, its row, its first
    column in that row, and its segment slot there (segment id slot + 1)."""

    unit: np.ndarray
    row: np.ndarray
    offset: np.ndarray
    slot: np.ndarray


def _place_units(layouts: Sequence[RowLayout]) -> dict[int, _Placed]:
    """Per unit length m, where `layouts` (one per row) put its units."""
    blocks: dict[int, list[_Placed]] = collections.defaultdict(list)
    for row, layout in enumerate(layouts):
        offset, slot = 0, 0
        for m, first, count in layout:
            blocks[m].append(_Placed(unit=np.arange(first, first + count), row=np.full(count, row),
                                     offset=offset + m * np.arange(count), slot=slot + np.arange(count)))
            offset += m * count
            slot += count
    return {m: _concatenate(placed) for m, placed in blocks.items()}


def _fill_rows(layouts: Sequence[RowLayout], units: dict[int, _UnitArrays], row_len: int, reads_per_row: int,
               num_sentences: int, causal_reads: bool) -> Rows:
    """The rows `layouts` describe, [N, row_len], and their reads, [N, reads_per_row]: every read of a unit at
    the column it reads (`causal_reads`), else a unit's one read at its segment slot."""
    filled = Rows.empty(len(layouts), row_len, reads_per_row, num_sentences)
    for m, placed in _place_units(layouts).items():
        unit = units[m]
        row_Ux1, columns_Uxm = placed.row[:, None], placed.offset[:, None] + np.arange(m)
        filled.tokens[row_Ux1, columns_Uxm] = unit.tokens[placed.unit]
        filled.segment_ids[row_Ux1, columns_Uxm] = placed.slot[:, None] + 1
        filled.positions[row_Ux1, columns_Uxm] = np.arange(m)
        if causal_reads:
            read_columns_Uxr = placed.offset[:, None] + unit.read_offsets[placed.unit]
            filled.read_pos[row_Ux1, read_columns_Uxr] = read_columns_Uxr
            filled.read_target[row_Ux1, read_columns_Uxr] = unit.read_targets[placed.unit]
            filled.read_sentence[row_Ux1, read_columns_Uxr] = unit.sentence[placed.unit][:, None]
        else:
            filled.read_pos[placed.row, placed.slot] = placed.offset + unit.read_offsets[placed.unit][:, 0]
            filled.read_target[placed.row, placed.slot] = unit.read_targets[placed.unit][:, 0]
            filled.read_sentence[placed.row, placed.slot] = unit.sentence[placed.unit]
    return filled


Stacked = TypeVar("Stacked", Rows, _Placed)


def _concatenate(parts: Sequence[Stacked]) -> Stacked:
    """`parts` (of one kind) as one, their arrays concatenated field by field."""
    kind = type(parts[0])
    return kind(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(kind)))


def pad_rows(rows: Rows, n: int, dummy: int) -> Rows:
    """`rows` with rows of padding added up to `n` rows, their reads on the dummy sentence `dummy`."""
    extra = n - len(rows.tokens)
    if extra == 0:
        return rows
    fields = {}
    for f in dataclasses.fields(Rows):
        a = getattr(rows, f.name)
        fill = dummy if f.name == "read_sentence" else 0
        fields[f.name] = np.concatenate([a, np.full((extra, a.shape[1]), fill, a.dtype)])
    return Rows(**fields)


def batch_sizes(num_rows: int, per_batch: int, num_devices: int) -> list[int]:
    """Full batches of `per_batch` rows, then one smaller power-of-two batch for the rest.

    Sizes are multiples of `num_devices` so rows split evenly; the remainder batch keeps
    padding under half of itself while adding at most one shape per power of two.
    """
    per_batch = -(-per_batch // num_devices) * num_devices
    full, rest = divmod(num_rows, per_batch)
    sizes = [per_batch] * full
    if rest:
        sizes.append(min(per_batch, -(-next_pow2(rest) // num_devices) * num_devices))
    return sizes
