"""Training objectives: causal LM, masked LM, and the GPT-BERT hybrid (MNTP + causal).

A batch is a dict of [B, L] int32 arrays: `tokens`, `segment_ids` (0 = padding) and
`positions`; optionally `word_starts` (1 where a token begins a jieba word, for whole-word
masking). Masking happens here, inside jit, from an explicit key.

- causal: the logit at t predicts token t+1 of the same document.
- mlm: bidirectional; the logit at a masked position t predicts the original token t.
- hybrid: rows [0, n_causal) are causal-LM rows, the rest are MNTP rows: bidirectional over
  the masked row, and the masked token at t is predicted from position t-1 (GPT-BERT).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Ids and rates the masking needs; `rate` may be a traced scalar (curricula)."""

    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    random_share: float = 0.1
    keep_share: float = 0.1
    whole_word: bool = False


def cross_entropy(
    logits_BxLxV: jax.Array, targets_BxL: jax.Array, weights_BxL: jax.Array, z_loss: float = 0.0
) -> tuple[jax.Array, jax.Array]:
    """Summed float32 cross-entropy (+ z-loss) over weighted positions, and the weight total."""
    logits = logits_BxLxV.astype(jnp.float32)
    log_z_BxL = jax.nn.logsumexp(logits, axis=-1)
    target_logit_BxL = jnp.take_along_axis(logits, targets_BxL[..., None], axis=-1)[..., 0]
    loss_BxL = log_z_BxL - target_logit_BxL + z_loss * jnp.square(log_z_BxL)
    weights = weights_BxL.astype(jnp.float32)
    return jnp.sum(loss_BxL * weights), jnp.sum(weights)


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


def compute_loss(
    model,
    params,
    batch: dict,
    rng: jax.Array,
    *,
    mask_rate: jax.Array | float = 0.15,
    masking: MaskingConfig | None = None,
    causal_rows: int = 0,
    z_loss: float = 0.0,
    deterministic: bool = True,
) -> tuple[jax.Array, dict]:
    """Mean loss over predicted tokens for the model's family, and metrics.

    `causal_rows` is the number of leading causal-LM rows in a hybrid batch.
    """
    family = model.config.family
    tokens, segment_ids, positions = batch["tokens"], batch["segment_ids"], batch["positions"]
    mask_rng, corrupt_rng, dropout_rng = jax.random.split(rng, 3)
    rngs = {"dropout": dropout_rng}
    if family == "causal":
        inputs, causal = tokens, True
        targets, weights = next_token_targets(tokens, segment_ids)
    else:
        if masking is None:
            raise ValueError(f"model family {family!r} needs a MaskingConfig")
        masked = choose_masked_positions(mask_rng, batch, mask_rate, masking)
        if family == "mlm":
            causal = False
            targets, weights = tokens, masked
        else:
            causal = jnp.arange(tokens.shape[0]) < causal_rows
            masked = masked & ~causal[:, None]
            targets, weights = mntp_targets(tokens, masked, segment_ids)
            clm_targets, clm_weights = next_token_targets(tokens, segment_ids)
            targets = jnp.where(causal[:, None], clm_targets, targets)
            weights = jnp.where(causal[:, None], clm_weights, weights)
        inputs = corrupt(corrupt_rng, tokens, masked, masking)
    logits = model.apply(params, inputs, segment_ids, positions, causal, deterministic=deterministic, rngs=rngs)
    loss_sum, count = cross_entropy(logits, targets, weights, z_loss)
    loss = loss_sum / jnp.maximum(count, 1.0)
    return loss, {"loss": loss, "predicted_tokens": count}
