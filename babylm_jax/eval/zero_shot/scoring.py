"""Jitted sentence log-likelihood kernels for causal, masked (PLL) and hybrid (MNTP) models.

Every variant reduces to "units" packed as segments into fixed [B, R] rows, plus "reads":
(row position, target token, sentence) triples whose log-probabilities are summed per sentence
(`unit_packing`: what a unit and its reads are per variant, and how they are packed).

Reads gather the final hidden state before the output projection, so PLL never builds
L x L x V logits. Rows come in a few static shapes (row length R, reads per row K), batches
are split over a 1-D mesh of the local devices, all batches are dispatched before a single
fetch, and reads are summed per sentence on the host in float64. `reference_scores` is the
slow, obvious definition the kernels are tested against.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm import tqdm

from babylm_jax.core.families import Scoring, family_spec
from babylm_jax.eval.zero_shot.unit_packing import Rows, batch_sizes, make_units, next_pow2, pack_units, pad_rows
from babylm_jax.eval.loaded import Params
from babylm_jax.model.transformer import Transformer

def scoring_name(family: str, within_word_l2r: bool = False) -> str:
    """How results name the scoring of a family's model, e.g. "causal", "pll_within_word_l2r"."""
    variant = family_spec(family).scoring
    return variant.value + ("_within_word_l2r" if within_word_l2r and variant is not Scoring.CAUSAL else "")


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

        scorer = SentenceScorer(model, params, Scoring.CAUSAL, mask_id=4)
        scores = scorer.score([[2, 17, 40], [2, 9]])  # float64 [2], sums of log-probs
    """

    def __init__(
        self,
        model: Transformer,
        params: Params,
        variant: Scoring,
        mask_id: int,
        batch_size: int = 64,
        row_len: int = 128,
        devices: Sequence[jax.Device] | None = None,
    ) -> None:
        if not isinstance(variant, Scoring):
            members = ", ".join(member.name for member in Scoring)
            raise ValueError(f"unknown scoring variant {variant!r}; use a member of Scoring ({members})")
        self.model, self.variant, self.mask_id = model, variant, mask_id
        self.batch_size, self.row_len = batch_size, min(row_len, model.config.max_len)
        self.mesh = Mesh(np.asarray(list(devices or jax.local_devices())), ("data",))
        self.set_params(params)
        causal = variant is Scoring.CAUSAL
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
        if word_ids is not None and self.variant is Scoring.CAUSAL:
            raise ValueError("within_word_l2r applies to masked/hybrid (pll/mntp) scoring only")
        num = len(sentences)
        groups = make_units(sentences, self.variant, self.mask_id, word_ids)
        if not groups:
            return np.zeros(num)
        causal_reads = self.variant is Scoring.CAUSAL
        all_rows = pack_units(groups, num, self.row_len, self.model.config.max_len, causal_reads)
        parts, ids = [], []
        self.last_real_tokens = self.last_padded_tokens = self.last_reads = 0
        for rows in all_rows:
            r = rows.tokens.shape[1]
            sizes = batch_sizes(len(rows.tokens), max(1, self.batch_size * self.row_len // r), self.mesh.size)
            rows = pad_rows(rows, sum(sizes), num)
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
    model: Transformer, params: Params, sentences: Sequence[Sequence[int]], variant: Scoring, mask_id: int,
    word_ids: Sequence[Sequence[int]] | None = None,
) -> list[float]:
    """The slow, obvious definition: one sentence (or masked copy) at a time, full logits, Python sum.

    Each input is alone in its row, padded at the end to a power of two (segment id 0), so
    that a few lengths compile.
    """
    forward = functools.partial(_reference_log_probs, model)

    def log_probs(tokens: Sequence[int]) -> np.ndarray:
        padded = np.zeros(max(16, next_pow2(len(tokens))), np.int32)
        padded[: len(tokens)] = tokens
        return np.asarray(forward(params, padded, (np.arange(len(padded)) < len(tokens)).astype(np.int32)))

    scores = []
    for s, tokens in enumerate(sentences):
        total = 0.0
        if variant is Scoring.CAUSAL:
            logp = log_probs(tokens)
            for t in range(1, len(tokens)):
                total += float(logp[t - 1, tokens[t]])
        else:
            for i in range(1, len(tokens) - 1):
                logp = log_probs(masked_copy(tokens, i, mask_id, None if word_ids is None else word_ids[s]))
                total += float(logp[i - 1 if variant is Scoring.MNTP else i, tokens[i]])
        scores.append(total)
    return scores
