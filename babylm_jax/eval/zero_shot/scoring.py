"""Jitted sentence log-likelihood kernels for causal, masked (PLL) and hybrid (MNTP) models.

Every variant reduces to "units" packed as segments into fixed [B, R] rows, plus "reads":
(row position, target token, sentence) triples whose log-probabilities are summed per sentence.

Sentences come framed as their family trains (`core.families`; `Framing.scoring_input`):
- causal: a unit is `[bos] + ids`; every position reads the next token of its unit.
- pll: a unit is one masked copy of `[cls] + ids + [sep]` (token i -> mask); one read at i.
  With `within_word_l2r`, the later tokens of the same word are masked too (Kauf & Ivanova 2023).
- mntp (hybrid, GPT-BERT): as pll, but the masked token at i is read at position i-1.

Reads gather the final hidden state before the output projection, so PLL never builds
L x L x V logits. Rows come in a few static shapes (row length R, reads per row K), batches
are split over a 1-D mesh of the local devices, all batches are dispatched before a single
fetch, and reads are summed per sentence on the host in float64.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm import tqdm

from babylm_jax.core.families import family_spec
from babylm_jax.model.loaded import Params
from babylm_jax.model.transformer import Transformer

VARIANTS = ("causal", "pll", "mntp")  # a family's `scoring` (core.families)


def scoring_name(family: str, within_word_l2r: bool = False) -> str:
    """How results name the scoring of a family's model, e.g. "causal", "pll_within_word_l2r"."""
    variant = family_spec(family).scoring
    return variant + ("_within_word_l2r" if within_word_l2r and variant != "causal" else "")


def masked_copy(tokens: Sequence[int], i: int, mask_id: int, word_ids: Sequence[int] | None) -> list[int]:
    """`tokens` (with [cls] at 0) with token i masked, and with `word_ids` (one per token after
    [cls]) also the later tokens of the same word (within_word_l2r)."""
    copy = list(tokens)
    copy[i] = mask_id
    if word_ids is not None:
        for j in range(i + 1, len(tokens) - 1):
            if word_ids[j - 1] == word_ids[i - 1]:
                copy[j] = mask_id
    return copy


@dataclasses.dataclass
class _Units:
    """Units of one length m: tokens [U, m], reads [U, r] as (offset, target), sentence id [U]."""

    tokens: list[np.ndarray] = dataclasses.field(default_factory=list)
    read_offsets: list[np.ndarray] = dataclasses.field(default_factory=list)
    read_targets: list[np.ndarray] = dataclasses.field(default_factory=list)
    sentence: list[np.ndarray] = dataclasses.field(default_factory=list)

    def add(self, tokens: np.ndarray, offsets: np.ndarray, targets: np.ndarray, sentence: np.ndarray) -> None:
        self.tokens.append(tokens)
        self.read_offsets.append(offsets)
        self.read_targets.append(targets)
        self.sentence.append(sentence)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (np.concatenate(self.tokens), np.concatenate(self.read_offsets),
                np.concatenate(self.read_targets), np.concatenate(self.sentence))


def make_units(
    sentences: Sequence[Sequence[int]], variant: str, mask_id: int, word_ids: Sequence[Sequence[int]] | None = None
) -> dict[int, _Units]:
    """Units grouped by length. `sentences` are model inputs (`Framing.scoring_input`)."""
    groups: dict[int, _Units] = collections.defaultdict(_Units)
    by_length: dict[int, list[int]] = collections.defaultdict(list)
    for s, tokens in enumerate(sentences):
        by_length[len(tokens)].append(s)
    for m, index in by_length.items():
        tokens_Sxm = np.asarray([sentences[s] for s in index], dtype=np.int32).reshape(len(index), m)
        sentence_S = np.asarray(index, dtype=np.int32)
        if variant == "causal":
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
        read = positions_n - 1 if variant == "mntp" else positions_n
        groups[m].add(
            copies_SxnXm.reshape(-1, m),
            np.tile(read, len(index))[:, None].astype(np.int32),
            tokens_Sxm[:, 1:-1].reshape(-1, 1),
            np.repeat(sentence_S, n),
        )
    return groups


def _next_pow2(x: int) -> int:
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

    @property
    def real_tokens(self) -> int:
        return int((self.segment_ids > 0).sum())


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
    arrays = {m: g.arrays() for m, g in groups.items()}
    short = {m: len(a[0]) for m, a in arrays.items() if m <= row_len}
    long_lengths = sorted(m for m in arrays if m > row_len)
    too_long = [m for m in long_lengths if m > max_len]
    if too_long:
        raise ValueError(f"a sentence needs {max(too_long)} tokens, more than the model's max_len={max_len}")
    # placements: (row_length, rows as lists of (m, first_unit, count)) per shape family
    layouts: list[tuple[int, list[list[tuple[int, int, int]]]]] = []
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
        layouts.append((_next_pow2(m), [[(m, u, 1)] for u in range(len(arrays[m][0]))]))

    shapes: dict[tuple[int, int], list[Rows]] = collections.defaultdict(list)
    for r, rows in layouts:
        if not rows:
            continue
        if causal_reads:  # every position may read the next token: K = R
            shapes[(r, r)].append(_fill_rows(rows, arrays, r, r, num_sentences, causal_reads))
            continue
        by_k = collections.defaultdict(list)  # one read per unit: K = units per row, bucketed
        for row in rows:
            by_k[max(2, _next_pow2(sum(c for _, _, c in row)))].append(row)
        for k, chosen in by_k.items():
            shapes[(r, k)].append(_fill_rows(chosen, arrays, r, k, num_sentences, causal_reads))
    return [_concat_rows(parts) for parts in shapes.values()]


def _fill_rows(rows, arrays, r: int, k: int, num_sentences: int, causal_reads: bool) -> Rows:
    n = len(rows)
    tokens = np.zeros((n, r), np.int32)
    segments = np.zeros((n, r), np.int32)
    positions = np.zeros((n, r), np.int32)
    read_pos = np.zeros((n, k), np.int32)
    read_target = np.zeros((n, k), np.int32)
    read_sentence = np.full((n, k), num_sentences, np.int32)
    # per length: unit index, row, offset in row, slot in row
    per_length = collections.defaultdict(lambda: ([], [], [], []))
    for i, row in enumerate(rows):
        offset, slot = 0, 0
        for m, first, c in row:
            units, rws, offs, slots = per_length[m]
            units.append(np.arange(first, first + c))
            rws.append(np.full(c, i))
            offs.append(offset + m * np.arange(c))
            slots.append(slot + np.arange(c))
            offset += m * c
            slot += c
    for m, (units, rws, offs, slots) in per_length.items():
        unit_tokens, unit_offsets, unit_targets, unit_sentence = arrays[m]
        units, rws, offs, slots = (np.concatenate(x) for x in (units, rws, offs, slots))
        cols = offs[:, None] + np.arange(m)
        tokens[rws[:, None], cols] = unit_tokens[units]
        segments[rws[:, None], cols] = slots[:, None] + 1
        positions[rws[:, None], cols] = np.arange(m)
        if causal_reads:
            read_cols = offs[:, None] + unit_offsets[units]
            read_pos[rws[:, None], read_cols] = read_cols
            read_target[rws[:, None], read_cols] = unit_targets[units]
            read_sentence[rws[:, None], read_cols] = unit_sentence[units][:, None]
        else:
            read_pos[rws, slots] = offs + unit_offsets[units][:, 0]
            read_target[rws, slots] = unit_targets[units][:, 0]
            read_sentence[rws, slots] = unit_sentence[units]
    return Rows(tokens, segments, positions, read_pos, read_target, read_sentence)


def _concat_rows(parts: list[Rows]) -> Rows:
    return Rows(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Rows)))


def _pad_rows(rows: Rows, n: int, dummy: int) -> Rows:
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
        sizes.append(min(per_batch, -(-_next_pow2(rest) // num_devices) * num_devices))
    return sizes


def read_logprobs(
    model: Transformer, params: Params, batch: dict[str, jax.Array], causal: bool, chunk: int = 512
) -> jax.Array:
    """[B, K] float32 log p(read_target | row) at each read position (hidden state gathered first).

    The reads are projected to the vocabulary `chunk` at a time, so each chunk's logits
    are still in cache for the log-sum-exp (a [B*K, V] array would not be).
    """
    hidden_BxRxD, _ = model.apply(
        params, batch["tokens"], batch["segment_ids"], batch["positions"], causal, method=Transformer.encode
    )
    hidden_BxKxD = jnp.take_along_axis(hidden_BxRxD, batch["read_pos"][..., None], axis=1)
    b, k, d = hidden_BxKxD.shape
    n, chunk = b * k, min(chunk, b * k)
    pad = -n % chunk
    hidden_CxNxD = jnp.pad(hidden_BxKxD.reshape(n, d), ((0, pad), (0, 0))).reshape(-1, chunk, d)
    target_CxN = jnp.pad(batch["read_target"].reshape(n), (0, pad)).reshape(-1, chunk)

    def chunk_logprobs(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        hidden_NxD, target_N = args
        logits_NxV = model.apply(params, hidden_NxD, method=Transformer.project).astype(jnp.float32)
        target_logit_N = jnp.take_along_axis(logits_NxV, target_N[:, None], axis=-1)[:, 0]
        return target_logit_N - jax.nn.logsumexp(logits_NxV, axis=-1)

    return jax.lax.map(chunk_logprobs, (hidden_CxNxD, target_CxN)).reshape(-1)[:n].reshape(b, k)


class SentenceScorer:
    """Scores sentences with one model; compiled shapes are reused across calls (tasks).

        scorer = SentenceScorer(model, params, "causal", mask_id=4)
        scores = scorer.score([[2, 17, 40], [2, 9]])  # float64 [2], sums of log-probs
    """

    def __init__(
        self,
        model: Transformer,
        params: Params,
        variant: str,
        mask_id: int,
        batch_size: int = 64,
        row_len: int = 128,
        devices: Sequence[jax.Device] | None = None,
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown scoring variant {variant!r}; use one of {VARIANTS}")
        self.model, self.variant, self.mask_id = model, variant, mask_id
        self.batch_size, self.row_len = batch_size, min(row_len, model.config.max_len)
        self.mesh = Mesh(np.asarray(list(devices or jax.local_devices())), ("data",))
        self.set_params(params)
        causal = variant == "causal"
        self._read = jax.jit(lambda p, b: read_logprobs(model, p, b, causal))
        self.last_real_tokens = 0
        self.last_padded_tokens = 0
        self.last_reads = 0

    def set_params(self, params: Params) -> None:
        """Scores with `params` from now on (same shapes: nothing recompiles)."""
        self.params = jax.device_put(params, NamedSharding(self.mesh, P()))

    @property
    def num_compiles(self) -> int:
        """Distinct shapes the read kernel has compiled so far."""
        return self._read._cache_size()

    def score(
        self, sentences: Sequence[Sequence[int]], word_ids: Sequence[Sequence[int]] | None = None,
        progress: str | None = None,
    ) -> np.ndarray:
        """Sum of log-probs of each sentence (model inputs from `Framing.scoring_input`), float64 [S].

        `word_ids` (pll/mntp only): one word index per token between [cls] and [sep]; the
        later tokens of the masked token's word are masked too (within_word_l2r). `progress`:
        a bar of that name counts the batches as they finish (all are dispatched first).
        """
        if word_ids is not None and self.variant == "causal":
            raise ValueError("within_word_l2r applies to masked/hybrid (pll/mntp) scoring only")
        num = len(sentences)
        groups = make_units(sentences, self.variant, self.mask_id, word_ids)
        if not groups:
            return np.zeros(num)
        all_rows = pack_units(groups, num, self.row_len, self.model.config.max_len, self.variant == "causal")
        parts, ids = [], []
        self.last_real_tokens = self.last_padded_tokens = self.last_reads = 0
        for rows in all_rows:
            r = rows.tokens.shape[1]
            sizes = batch_sizes(len(rows.tokens), max(1, self.batch_size * self.row_len // r), self.mesh.size)
            rows = _pad_rows(rows, sum(sizes), num)
            self.last_real_tokens += rows.real_tokens
            self.last_padded_tokens += rows.tokens.size
            self.last_reads += int((rows.read_sentence < num).sum())
            sharding = NamedSharding(self.mesh, P("data"))
            for start, size in zip(np.cumsum([0, *sizes[:-1]]), sizes):
                batch = {f.name: getattr(rows, f.name)[start:start + size]
                         for f in dataclasses.fields(Rows) if f.name != "read_sentence"}
                parts.append(self._read(self.params, jax.device_put(batch, sharding)))
            ids.append(rows.read_sentence.reshape(-1))
        done = [jax.device_get(x) for x in tqdm(parts, desc=progress, unit="batch", disable=progress is None, leave=False)]
        reads = np.concatenate([x.reshape(-1) for x in done]).astype(np.float64)
        return np.bincount(np.concatenate(ids), weights=reads, minlength=num + 1)[:num]  # id num = padding


@functools.partial(jax.jit, static_argnums=0)
def _reference_log_probs(model: Transformer, params: Params, tokens_L: jax.Array, segments_L: jax.Array) -> jax.Array:
    """[L, V] log-probs of one row: the reference's forward, compiled once per model and length."""
    return jax.nn.log_softmax(model.apply(params, tokens_L[None], segments_L[None])[0], axis=-1)


def reference_scores(
    model: Transformer, params: Params, sentences: Sequence[Sequence[int]], variant: str, mask_id: int,
    word_ids: Sequence[Sequence[int]] | None = None,
) -> list[float]:
    """The slow, obvious definition: one sentence (or masked copy) at a time, full logits, Python sum.

    Each input is alone in its row, padded at the end to a power of two (segment id 0), so
    that a few lengths compile.
    """
    forward = functools.partial(_reference_log_probs, model)

    def log_probs(tokens: Sequence[int]) -> np.ndarray:
        padded = np.zeros(max(16, _next_pow2(len(tokens))), np.int32)
        padded[: len(tokens)] = tokens
        return np.asarray(forward(params, padded, (np.arange(len(padded)) < len(tokens)).astype(np.int32)))

    scores = []
    for s, tokens in enumerate(sentences):
        total = 0.0
        if variant == "causal":
            logp = log_probs(tokens)
            for t in range(1, len(tokens)):
                total += float(logp[t - 1, tokens[t]])
        else:
            for i in range(1, len(tokens) - 1):
                logp = log_probs(masked_copy(tokens, i, mask_id, None if word_ids is None else word_ids[s]))
                total += float(logp[i - 1 if variant == "mntp" else i, tokens[i]])
        scores.append(total)
    return scores
