"""One Transformer stack for every family: causal decoder, masked encoder, GPT-BERT hybrid.

The families differ only in the attention mask (causal or bidirectional, chosen per row)
and in the output head (encoders and hybrids add a dense-GELU-norm transform before the
tied output projection, as BERT does). Losses live in `objectives.py`.

    model = Transformer(ModelConfig.from_config(config.model))
    params = model.init(key, tokens_BxL)
    logits_BxLxV = model.apply(params, tokens_BxL, segment_ids_BxL, positions_BxL)
    hidden_BxLxD, _ = model.apply(params, tokens_BxL, method=Transformer.encode)
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from babylm_jax.config.model import ModelConfig
from babylm_jax.core.families import family_spec
from babylm_jax.model import attention, layers

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x)); with a `cache`, one decoding
    step of new tokens (`model.decode`)."""

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        x_BxLxD: jax.Array,
        rope: tuple[jax.Array, jax.Array],
        mask: attention.Mask,
        deterministic: bool,
        cache: layers.KVCache | None = None,
    ) -> tuple[jax.Array, jax.Array | layers.KVCache]:
        c = self.config
        dtype = c.compute_dtype
        h = layers.make_norm(c.norm, dtype, "attn_norm", c.norm_kernel)(x_BxLxD)
        h, cache = layers.Attention(c.num_heads, dtype, c.attention, name="attn")(h, rope, mask, cache)
        h = nn.Dropout(c.dropout)(h, deterministic=deterministic)
        mlp_norm = layers.make_norm(c.norm, dtype, "mlp_norm", c.norm_kernel)
        if c.norm_kernel == "xla":
            x = x_BxLxD + h.astype(x_BxLxD.dtype)
            h = mlp_norm(x)
        else:  # the residual add, the norm and the cast in one pass
            x, h = mlp_norm(x_BxLxD, add=h)
        h = layers.Mlp(c.d_ff, c.mlp, dtype, name="mlp")(h)
        x = x + nn.Dropout(c.dropout)(h, deterministic=deterministic).astype(x.dtype)
        # new carry, and this block's input as a hidden state (or, decoding, its updated cache)
        return x, x_BxLxD if cache is None else cache


class Transformer(nn.Module):
    """Token embedding, N blocks (looped or `nn.scan`ned), final norm, tied output head."""

    config: ModelConfig

    def setup(self) -> None:
        c = self.config
        self.embed = nn.Embed(
            c.vocab_size, c.d_model,
            embedding_init=layers.dense_init("vocab", "embed"), name="embed",
        )
        block = Block
        if c.remat != "none":
            block = nn.remat(Block, policy=REMAT_POLICIES[c.remat], static_argnums=(4,))
        if c.scan_layers:
            self.layers = nn.scan(
                block,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                length=c.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )(c, name="layers")
        else:
            self.blocks = [block(c, name=f"layers_{i}") for i in range(c.num_layers)]
        self.final_norm = layers.make_norm(c.norm, c.compute_dtype, "final_norm", c.norm_kernel)
        if c.has_head_transform:
            self.head_dense = nn.Dense(
                c.d_model, dtype=c.compute_dtype, kernel_init=layers.dense_init("embed", "embed_out"),
                name="head_dense",
            )
            self.head_norm = layers.make_norm(c.norm, c.compute_dtype, "head_norm", c.norm_kernel)

    def encode(
        self,
        tokens_BxL: jax.Array,
        segment_ids_BxL: jax.Array | None = None,
        positions_BxL: jax.Array | None = None,
        causal: bool | jax.Array | None = None,
        deterministic: bool = True,
        return_hidden_states: bool = False,
    ) -> tuple[jax.Array, jax.Array | None]:
        """Final normed hidden states [B, L, D] and, if asked, all [N+1, B, L, D].

        Hidden state i < N is the input of block i (0 = embeddings); hidden state N is the
        final normed output, as Hugging Face models report `hidden_states`.
        `causal` may be a bool or a per-row [B] bool array (hybrid batches); by default
        causal families attend causally and the others bidirectionally.
        """
        c = self.config
        b, length = tokens_BxL.shape
        if length > c.max_len:  # positions index a RoPE table of max_len rows
            raise ValueError(f"rows of {length} tokens are longer than model.max_len={c.max_len}")
        if segment_ids_BxL is None:
            segment_ids_BxL = jnp.ones((b, length), jnp.int32)
        if positions_BxL is None:
            positions_BxL = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (b, length))
        if causal is None:
            causal = family_spec(c.family).causal
        mask = attention.Mask.of(segment_ids_BxL, causal)
        rope = layers.rope_angles(positions_BxL, c.d_model // c.num_heads, c.rope_theta, c.max_len)

        # the stream between blocks in c.stream_dtype (float32 by default); each block computes in c.compute_dtype
        x_BxLxD = layers.embed_tokens(self.embed.embedding, tokens_BxL, c.embedding_grad).astype(c.stream_dtype)
        if c.scan_layers:
            x_BxLxD, block_inputs_NxBxLxD = self.layers(x_BxLxD, rope, mask, deterministic)
        else:
            inputs = []
            for block in self.blocks:
                x_BxLxD, block_input = block(x_BxLxD, rope, mask, deterministic)
                inputs.append(block_input)
            block_inputs_NxBxLxD = jnp.stack(inputs) if return_hidden_states else None
        hidden_BxLxD = self.final_norm(x_BxLxD)
        if not return_hidden_states:
            return hidden_BxLxD, None
        return hidden_BxLxD, jnp.concatenate([block_inputs_NxBxLxD, hidden_BxLxD[None]], axis=0)

    def head(self, hidden_XxD: jax.Array) -> jax.Array:
        """Float32 inputs of the output projection: the head transform (mlm, hybrid) or the hidden states."""
        if self.config.has_head_transform:
            hidden_XxD = self.head_norm(nn.gelu(self.head_dense(hidden_XxD), approximate=False))
        return hidden_XxD.astype(jnp.float32)

    def output_embedding(self) -> jax.Array:
        """The [V, D] token embedding, which is also the tied output projection."""
        return self.embed.embedding

    def project(self, hidden_XxD: jax.Array) -> jax.Array:
        """Float32 logits [..., V] from final hidden states of any leading shape."""
        return self.embed.attend(self.head(hidden_XxD))

    def __call__(self, tokens_BxL: jax.Array, segment_ids_BxL: jax.Array | None = None,
                 positions_BxL: jax.Array | None = None, causal: bool | jax.Array | None = None,
                 deterministic: bool = True) -> jax.Array:
        """Float32 logits [B, L, V] (`encode`, then `project`)."""
        hidden_BxLxD, _ = self.encode(tokens_BxL, segment_ids_BxL, positions_BxL, causal, deterministic)
        return self.project(hidden_BxLxD)


def weight_decay_mask(params: Any) -> Any:
    """True for the parameters weight decay applies to: the matmul kernels, chosen by name.

    A leaf is decayed when its parameter name (the last dict key on its path) is "kernel":
    attention, MLP and head-transform weights, and a fine-tuning head's Dense layers. Norm
    scales and biases are not, whatever their rank (under `nn.scan` they are [layers, d]).
    The token embedding is not decayed either: it is also the tied output projection, and
    decoupled decay shrinks every row at every step while a rare token's row is updated only
    when that token occurs, so decay would erase what little the model learns of rare
    characters (the long tail of a Chinese vocabulary).
    """

    def is_kernel(path: tuple, _: Any) -> bool:
        names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        return bool(names) and names[-1] == "kernel"

    return jax.tree_util.tree_map_with_path(is_kernel, params)


def count_params(params: Any) -> int:
    """Total number of parameters in a pytree."""
    return int(sum(x.size for x in jax.tree.leaves(params)))
