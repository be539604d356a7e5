"""Training objectives: causal LM, masked LM, and the GPT-BERT hybrid (MNTP + causal).

A batch is a dict of [B, L] int32 arrays: `tokens`, `segment_ids` (0 = padding) and
`positions`; optionally `word_starts` (1 where a token begins a jieba word, for whole-word
masking). Masking happens here, inside jit, from an explicit key.

Each model family (`core.families`) has its objective in OBJECTIVES, keyed by the family's name:
- causal, `next_token_objective`: the logit at t predicts token t+1 of the same document.
- mlm, `masked_token_objective`: bidirectional; the logit at a masked position t predicts the original token t.
- hybrid, `masked_next_token_objective`: rows [0, n_causal) are causal-LM rows, the rest are MNTP rows:
  bidirectional over the masked row, and the masked token at t is predicted from position t-1
  (GPT-BERT).
An objective maps (batch, (mask key, corruption key), mask rate, settings) to (inputs, causal,
targets, weights): the model's input tokens, which rows attend causally (a bool or a [B] array),
and the token each position predicts where its weight is nonzero. `LossSettings` holds a run's
static settings of the loss (masking, hybrid causal rows, z-loss, chunks, logits dtype, ...), plain
values the training code reads from the run's config (`training.step.loss_settings`); the
cross-entropy itself is `model.loss`:

    settings = LossSettings(masking=masking, z_loss=1e-4, chunk=loss_chunk(platform, vocab_size))
    loss, metrics = compute_loss(model, params, batch, rng, mask_rate=rate, settings=settings)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from babylm_jax.core.families import family_spec
from babylm_jax.model.aux_heads import AuxObjective
from babylm_jax.model.loss import LOSS_CHUNK, projected_loss
from babylm_jax.model.transformer import Transformer

@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Ids and rates the masking needs; `rate` may be a traced scalar (curricula)."""

    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    random_share: float = 0.1
    keep_share: float = 0.1
    whole_word: bool = False


Batch = dict[str, jax.Array]  # [B, L] int32 arrays: tokens, segment_ids, positions (and word_starts)


@dataclasses.dataclass(frozen=True)
class LossSettings:
    """A run's static settings of the loss (`compute_loss` says what each does), closed over by its jitted steps."""

    masking: MaskingConfig | None = None
    hybrid_causal_share: float = 0.0  # the share of a hybrid batch's rows (the leading ones) that are causal
    max_mask_rate: float | None = None  # the mask rate gathered positions are sized for (None: the step's)
    z_loss: float = 0.0
    deterministic: bool = True  # no dropout
    chunk: int = LOSS_CHUNK  # rows of logits at a time
    logits_dtype: Any = jnp.float32  # of a chunk's stored logits
    kernel: str = "xla"  # the loss's kernel (model.loss.projected_loss)
    interpret: bool = False  # "pallas" kernels in interpret mode (the CPU)
    row_groups: int = 1  # the devices a batch's rows are split over
    summed: bool = False  # the sum instead of the mean (accumulation divides once, by all predicted tokens)

    def for_evaluation(self) -> LossSettings:
        """The eval loss's settings: the plain cross-entropy (no z-loss) of float32 logits, no dropout,
        the mean, the gathered positions sized for the eval's own mask rate."""
        return dataclasses.replace(self, max_mask_rate=None, z_loss=0.0, deterministic=True,
                                   logits_dtype=jnp.float32, summed=False)

    def causal_rows(self, rows: int) -> int:
        """The leading causal-LM rows of a hybrid batch of `rows` rows."""
        return int(round(rows * self.hybrid_causal_share))


def next_token_targets(tokens_BxL: jax.Array, segment_ids_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Targets shifted left by one and weights that keep each prediction inside its document."""
    targets_BxL = jnp.pad(tokens_BxL[:, 1:], ((0, 0), (0, 1)))
    next_segment_BxL = jnp.pad(segment_ids_BxL[:, 1:], ((0, 0), (0, 1)))
    weights_BxL = (segment_ids_BxL == next_segment_BxL) & (segment_ids_BxL > 0)
    return targets_BxL, weights_BxL


def choose_masked_positions(
    rng: jax.Array, batch: dict, rate: jax.Array | float, config: MaskingConfig
) -> jax.Array:
    """[B, L] bool: which maskable tokens to predict, about `rate` of them.

    With `whole_word`, the draw is made per word (at its first token) and spread over the
    word's later tokens, so a word is masked whole or not at all.
    """
    tokens, segment_ids = batch["tokens"], batch["segment_ids"]
    maskable_BxL = (segment_ids > 0) & ~jnp.isin(tokens, jnp.asarray(config.special_ids, dtype=tokens.dtype))
    draw_BxL = jax.random.uniform(rng, tokens.shape) < rate
    if config.whole_word and "word_starts" in batch:
        word_index_BxL = jnp.cumsum(batch["word_starts"].astype(jnp.int32), axis=1)
        # Each token takes the draw made at its word's first token.
        start_draw_BxL = jnp.where(batch["word_starts"] > 0, draw_BxL, False)
        word_drawn = jax.vmap(
            lambda idx, d: jax.ops.segment_max(d.astype(jnp.int32), idx, num_segments=tokens.shape[1] + 1)
        )(word_index_BxL, start_draw_BxL)
        draw_BxL = jnp.take_along_axis(word_drawn, word_index_BxL, axis=1) > 0
    return maskable_BxL & draw_BxL


def corrupt(rng: jax.Array, tokens_BxL: jax.Array, masked_BxL: jax.Array, config: MaskingConfig) -> jax.Array:
    """BERT's 80/10/10: chosen tokens become [MASK], a random token, or stay as they are."""
    choice_rng, token_rng = jax.random.split(rng)
    u_BxL = jax.random.uniform(choice_rng, tokens_BxL.shape)
    random_tokens = jax.random.randint(token_rng, tokens_BxL.shape, 0, config.vocab_size, dtype=tokens_BxL.dtype)
    mask_share = 1.0 - config.random_share - config.keep_share
    replaced = jnp.where(u_BxL < mask_share, config.mask_id, jnp.where(u_BxL < mask_share + config.random_share, random_tokens, tokens_BxL))
    return jnp.where(masked_BxL, replaced, tokens_BxL)


def mntp_targets(tokens_BxL: jax.Array, masked_BxL: jax.Array, segment_ids_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MNTP: position t predicts token t+1 when token t+1 is masked and in the same document."""
    targets_BxL, same_doc_BxL = next_token_targets(tokens_BxL, segment_ids_BxL)
    next_masked_BxL = jnp.pad(masked_BxL[:, 1:], ((0, 0), (0, 1)))
    return targets_BxL, same_doc_BxL & next_masked_BxL


def prediction_capacity(num_positions: int, always: int, max_rate: float, whole_word: bool, multiple: int) -> int:
    """A static number of predicted positions to gather: `always` (causal rows) plus a bound on
    the masked ones, six standard deviations above the mean (doubled for whole-word draws),
    rounded up to `multiple`; at most `num_positions`."""
    drawn = num_positions - always
    spread = 6.0 * math.sqrt(drawn * max_rate * (1.0 - max_rate)) * (2.0 if whole_word else 1.0)
    capacity = always + math.ceil(drawn * max_rate + spread)
    return min(num_positions, -(-capacity // multiple) * multiple)


def compute_loss(model: Transformer, params: Any, batch: Batch, rng: jax.Array, *, mask_rate: jax.Array | float = 0.15,
                 settings: LossSettings = LossSettings(), aux_objective: AuxObjective | None = None,
                 ) -> tuple[jax.Array, dict[str, Any]]:
    """Mean loss over predicted tokens of the model family's objective (the sum with `settings.summed`), and metrics.

    A hybrid batch's leading `settings.causal_rows(rows)` rows are causal-LM rows. Masked and
    hybrid models project only the predicted positions to the vocabulary: they are gathered
    into a static number of slots (`prediction_capacity` for `settings.max_mask_rate`, by default
    `mask_rate` when it is a number), with a fallback to every position in the rare batch
    that predicts more. The loss is `loss.projected_loss` by `settings.kernel` (for "xla" `settings.chunk`
    rows at a time), its logits stored in `settings.logits_dtype`; with `settings.row_groups` > 1 (the devices a batch's
    rows are split over) each contiguous block of rows gathers and projects its own predicted positions.
    `aux_objective` adds the auxiliary heads' weighted summed losses to the summed loss (so divided by
    the predicted tokens like it) and their sums to the metrics (`aux`); metrics["loss"] stays the LM loss.
    """
    spec = family_spec(model.config.family)
    if settings.masking is None and not spec.causal:
        raise ValueError(f"model family {spec.name!r} needs a MaskingConfig")
    tokens, segment_ids, positions = batch["tokens"], batch["segment_ids"], batch["positions"]
    mask_rng, corrupt_rng, dropout_rng = jax.random.split(rng, 3)
    inputs, causal, targets, weights = OBJECTIVES[spec.name](batch, (mask_rng, corrupt_rng), mask_rate, settings)
    hidden_BxLxD, _ = model.apply(
        params, inputs, segment_ids, positions, causal, deterministic=settings.deterministic,
        rngs={"dropout": dropout_rng}, method="encode",
    )
    weights_N = weights.reshape(-1).astype(jnp.float32)
    count = jnp.sum(weights_N)
    rate = settings.max_mask_rate if settings.max_mask_rate is not None else mask_rate
    groups = settings.row_groups if tokens.shape[0] % settings.row_groups == 0 else 1
    per_group = weights_N.shape[0] // groups
    capacity = per_group
    if not spec.causal and isinstance(rate, (int, float)):
        # the causal rows lead the batch: the first block holds the most of them
        causal_rows = settings.causal_rows(tokens.shape[0])
        always = min(causal_rows, tokens.shape[0] // groups) * tokens.shape[1] if spec.causal_rows else 0
        capacity = prediction_capacity(per_group, always, float(rate), settings.masking.whole_word, 8)
    loss_sum = _predicted_loss(model, params, hidden_BxLxD, targets.reshape(-1), weights_N, capacity, groups, settings)
    loss = loss_sum / jnp.maximum(count, 1.0)
    metrics = {"loss": loss, "predicted_tokens": count, "lm_loss_sum": loss_sum}
    if aux_objective is None:
        return loss_sum if settings.summed else loss, metrics
    aux_sum, metrics["aux"] = aux_objective.loss(
        params, hidden_BxLxD, *aux_objective.positions(tokens, segment_ids, targets, weights))
    total = loss_sum + aux_sum  # the heads' sums are divided by the predicted tokens too
    return total if settings.summed else total / jnp.maximum(count, 1.0), metrics


Rngs = tuple[jax.Array, jax.Array]  # (mask key, corruption key)
ObjectiveOutput = tuple[jax.Array, jax.Array | bool, jax.Array, jax.Array]  # (inputs, causal, targets, weights)


def next_token_objective(batch: Batch, rngs: Rngs, mask_rate: jax.Array | float,
                         settings: LossSettings) -> ObjectiveOutput:
    """Causal LM: every row causal, every position predicts the next token of its document."""
    return (batch["tokens"], True, *next_token_targets(batch["tokens"], batch["segment_ids"]))


def masked_token_objective(batch: Batch, rngs: Rngs, mask_rate: jax.Array | float,
                           settings: LossSettings) -> ObjectiveOutput:
    """Masked LM: bidirectional rows, BERT-corrupted; a masked position predicts its own token."""
    mask_rng, corrupt_rng = rngs
    tokens = batch["tokens"]
    masked = choose_masked_positions(mask_rng, batch, mask_rate, settings.masking)
    return corrupt(corrupt_rng, tokens, masked, settings.masking), False, tokens, masked


def masked_next_token_objective(batch: Batch, rngs: Rngs, mask_rate: jax.Array | float,
                                settings: LossSettings) -> ObjectiveOutput:
    """GPT-BERT: the first `settings.causal_rows(rows)` rows are causal-LM rows, the others MNTP rows
    (the token masked at t predicted from position t-1)."""
    mask_rng, corrupt_rng = rngs
    tokens, segment_ids = batch["tokens"], batch["segment_ids"]
    masked = choose_masked_positions(mask_rng, batch, mask_rate, settings.masking)
    causal = jnp.arange(tokens.shape[0]) < settings.causal_rows(tokens.shape[0])
    masked = masked & ~causal[:, None]
    targets, weights = mntp_targets(tokens, masked, segment_ids)
    clm_targets, clm_weights = next_token_targets(tokens, segment_ids)
    targets = jnp.where(causal[:, None], clm_targets, targets)
    weights = jnp.where(causal[:, None], clm_weights, weights)
    return corrupt(corrupt_rng, tokens, masked, settings.masking), causal, targets, weights


Objective = Callable[[Batch, Rngs, jax.Array | float, LossSettings], ObjectiveOutput]
OBJECTIVES: dict[str, Objective] = {  # a key of core.families.FAMILY_SPECS -> the family's objective
    "causal": next_token_objective,
    "mlm": masked_token_objective,
    "hybrid": masked_next_token_objective,
}


def _predicted_loss(
    model, params, hidden_BxLxD: jax.Array, targets_N: jax.Array, weights_N: jax.Array, capacity: int, groups: int,
    settings: LossSettings,
) -> jax.Array:
    """Summed loss of the predicted positions: gathered into `capacity` slots per row group
    when that is fewer than the group's positions and every group fits, else all positions."""
    embed_VxD = model.apply(params, method="output_embedding")
    hidden_NxD = hidden_BxLxD.reshape(-1, hidden_BxLxD.shape[-1])
    per_group = hidden_NxD.shape[0] // groups

    def loss_over(hidden_KxD, targets_K, weights_K):
        x_KxD = model.apply(params, hidden_KxD, method="head")
        return projected_loss(settings.kernel, x_KxD, embed_VxD, targets_K, weights_K, settings.z_loss, settings.chunk,
                              groups, model.config.compute_dtype, settings.logits_dtype, settings.interpret)

    def all_positions():
        return loss_over(hidden_NxD, targets_N, weights_N)

    if capacity >= per_group:
        return all_positions()
    weights_GxN = weights_N.reshape(groups, per_group)
    count_G = jnp.sum(weights_GxN, axis=1)

    def predicted_positions():
        index_GxK = jax.vmap(lambda w: jnp.nonzero(w, size=capacity, fill_value=0)[0])(weights_GxN)

        def gather(x_N):
            return jnp.take_along_axis(x_N.reshape(groups, per_group, *x_N.shape[1:]),
                                       index_GxK.reshape(groups, capacity, *(1,) * (x_N.ndim - 1)), axis=1)

        weights_GxK = jnp.where(jnp.arange(capacity) < count_G[:, None], gather(weights_N), 0.0)
        hidden_KxD = gather(hidden_NxD).reshape(groups * capacity, -1)
        return loss_over(hidden_KxD, gather(targets_N).reshape(-1), weights_GxK.reshape(-1))

    return jax.lax.cond(jnp.all(count_G <= capacity), predicted_positions, all_positions)
