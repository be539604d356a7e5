"""Auxiliary character heads: a training-only objective that predicts each hanzi's reading and radical.

    heads = AuxHeadsConfig.from_config(config.train)      # None when every weight is 0
    objective = AuxObjective(heads, sizes, labels_VxF)    # labels from data.hanzi_labels
    params = {**model_params, AUX_COLLECTION: objective.init(rng, d_model)}
    weighted_sum, sums = objective.loss(params, hidden_BxLxD, label_ids_BxL, weights_BxL)

One linear layer per head on the final hidden states. `train.aux_heads.position`:
"auto" is the model family's (`core.families`): "input" for causal models (measured better in
the hanzi study's auxiliary-heads arms, experiments/README.md) and "target" for mlm and hybrid (the masked
position; not measured); "target" predicts the labels of the token the language-model loss
predicts there (the next token for causal rows, the masked token at its own position for mlm
and at the position before it for hybrid MNTP rows); "input" predicts each position's own
input token. Heads live in their own collection of the params (`AUX_COLLECTION`):
checkpoints keep them, the model's `apply`, evaluation and export never read them.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from babylm_jax.config.training import AUX_HEADS, TrainConfig
from babylm_jax.corpus import hanzi_labels
from babylm_jax.corpus.hanzi_labels import IGNORE

AUX_COLLECTION = "aux_heads"


@dataclasses.dataclass(frozen=True)
class AuxHeadsConfig:
    """Loss weight per head (AUX_HEADS order, weights > 0 only) and where the heads predict."""

    weights: tuple[tuple[str, float], ...]
    position: str = "target"
    logits_dtype: str = "float32"  # the heads' matmuls and stored logits, as train.loss_logits_dtype the LM's

    @classmethod
    def from_config(cls, train: TrainConfig, family: str = "causal") -> "AuxHeadsConfig | None":
        """From `train.aux_heads` (checked by its schema, `config.training.AuxHeadsSettings`), "auto"
        resolved for the model `family`."""
        settings = train.aux_heads
        weights = tuple((name, getattr(settings, name)) for name in AUX_HEADS if getattr(settings, name) > 0)
        return cls(weights, settings.position_for(family), train.loss_logits_dtype) if weights else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.weights)


class AuxHeads(nn.Module):
    """One linear classifier per head over the final hidden states: float32 parameters, computed in `dtype`."""

    sizes: tuple[tuple[str, int], ...]
    dtype: str = "float32"

    @nn.compact
    def __call__(self, hidden_NxD: jax.Array) -> dict[str, jax.Array]:
        x = hidden_NxD.astype(self.dtype)
        return {name: nn.Dense(size, dtype=self.dtype, name=name)(x) for name, size in self.sizes}


@dataclasses.dataclass(frozen=True, eq=False)
class AuxObjective:
    """The heads of one run: their config, their sizes and the vocabulary's [V, AUX_HEADS] labels."""

    config: AuxHeadsConfig
    sizes: dict[str, int]
    labels_VxF: np.ndarray

    @property
    def module(self) -> AuxHeads:
        return AuxHeads(tuple((name, self.sizes[name]) for name in self.config.names), self.config.logits_dtype)

    def init(self, rng: jax.Array, d_model: int) -> dict:
        return self.module.init(rng, jnp.zeros((1, d_model), jnp.float32))["params"]

    def loss(self, params: dict, hidden_BxLxD: jax.Array, label_ids_BxL: jax.Array,
             weights_BxL: jax.Array) -> tuple[jax.Array, dict]:
        """(sum over heads of weight x summed cross-entropy, {head: [loss sum, correct, count]}).

        `label_ids_BxL` are the token ids whose labels a position predicts and `weights_BxL` the
        positions that predict (both from `positions`); tokens without a label add nothing. The logits are
        reduced in float32 as log-sum-exp minus the label's logit, picked by comparison rather than gathered
        (no scatter in the backward pass); a position is correct when its label's logit is the largest
        (a tie counts)."""
        hidden_NxD = hidden_BxLxD.reshape(-1, hidden_BxLxD.shape[-1])
        logits = self.module.apply({"params": params[AUX_COLLECTION]}, hidden_NxD)
        labels_NxF = jnp.asarray(self.labels_VxF)[label_ids_BxL.reshape(-1)]
        total, sums = jnp.zeros((), jnp.float32), {}
        for name, weight in self.config.weights:
            labels_N = labels_NxF[:, AUX_HEADS.index(name)]
            w_N = weights_BxL.reshape(-1).astype(jnp.float32) * (labels_N != IGNORE)
            logits_NxC = logits[name].astype(jnp.float32)
            is_label_NxC = jnp.arange(logits_NxC.shape[-1])[None, :] == labels_N[:, None]
            label_logit_N = jnp.sum(jnp.where(is_label_NxC, logits_NxC, 0.0), axis=-1)
            ce_N = jax.nn.logsumexp(logits_NxC, axis=-1) - label_logit_N
            correct_N = label_logit_N >= jnp.max(logits_NxC, axis=-1)
            sums[name] = jnp.stack([jnp.sum(ce_N * w_N), jnp.sum(correct_N * w_N), jnp.sum(w_N)])
            total = total + weight * sums[name][0]
        return total, sums

    def positions(self, tokens_BxL: jax.Array, segment_ids_BxL: jax.Array, targets_BxL: jax.Array,
                  weights_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(label ids, weights): the language-model targets where it predicts, or each input token."""
        if self.config.position == "target":
            return targets_BxL, weights_BxL
        return tokens_BxL, segment_ids_BxL > 0


def step_metrics(sums: dict) -> dict:
    """Per-head mean loss and accuracy over labelled positions, from summed [loss, correct, count]."""
    out = {}
    for name, (loss_sum, correct, count) in sums.items():
        n = jnp.maximum(count, 1.0)
        out[f"aux_{name}_loss"], out[f"aux_{name}_acc"] = loss_sum / n, correct / n
    return out


def build_objective(train: TrainConfig, pieces: list[str] | None, vocab_size: int,
                    family: str = "causal") -> AuxObjective | None:
    """The run's objective (None without heads); with `pieces` None the labels are left empty (shapes only)."""
    config = AuxHeadsConfig.from_config(train, family)
    if config is None:
        return None
    sizes = hanzi_labels.head_sizes()
    if pieces is None:
        return AuxObjective(config, sizes, np.full((vocab_size, len(AUX_HEADS)), IGNORE, np.int32))
    table = hanzi_labels.label_table(pieces, rows=vocab_size)
    hanzi_labels.check_vocabulary(table, config.names)
    return AuxObjective(config, sizes, table)


def init_params(train: TrainConfig, d_model: int, rng: jax.Array) -> dict | None:
    """Fresh head parameters for `train.aux_heads` (None without heads)."""
    objective = build_objective(train, None, 1)
    return None if objective is None else objective.init(rng, d_model)
