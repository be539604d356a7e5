"""Transformer building blocks: norms, rotary embeddings, attention (backends: `attention.py`), MLPs.

Shape letters: B batch, L sequence, D model width, H heads, K head width, F MLP width.
Parameters carry logical axis names ("embed", "heads", "kv", "mlp", "vocab") that
`training.sharding` maps onto mesh axes.
"""
from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from babylm_jax.model import attention
from babylm_jax.model.fused_norm import FusedNorm

Dtype = Any

_init = nn.initializers.normal(stddev=0.02)
ONE_HOT_CHUNK_BYTES = 256 * 2**20  # a chunk's bfloat16 one-hot tokens in the "one_hot" embedding gradient


def dense_init(*axes: str) -> nn.initializers.Initializer:
    """A N(0, 0.02) kernel initializer tagged with logical axis names."""
    return nn.with_logical_partitioning(_init, axes)


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32."""

    eps: float = 1e-6
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        scale = self.param(
            "scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)), (x_BxLxD.shape[-1],)
        )
        x = x_BxLxD.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return (x * scale).astype(self.dtype)


class LayerNorm(nn.Module):
    """LayerNorm with scale and bias, computed in float32."""

    eps: float = 1e-6
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        d = x_BxLxD.shape[-1]
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)), (d,))
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)), (d,))
        x = x_BxLxD.astype(jnp.float32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        x = (x - mean) * jax.lax.rsqrt(var + self.eps)
        return (x * scale + bias).astype(self.dtype)


def make_norm(kind: str, dtype: Dtype, name: str | None = None, kernel: str = "xla") -> nn.Module:
    """The norm named by `model.norm` ("rmsnorm" or "layernorm"), by `model.norm_kernel`: "xla", or
    "pallas" / "pallas_interpret" (`fused_norm.FusedNorm`, which also takes the residual add)."""
    if kernel != "xla" and kind in ("rmsnorm", "layernorm"):
        return FusedNorm(kind == "rmsnorm", dtype, kernel == "pallas_interpret", name=name)
    if kind == "rmsnorm":
        return RMSNorm(dtype=dtype, name=name)
    if kind == "layernorm":
        return LayerNorm(dtype=dtype, name=name)
    raise ValueError(f"config key model.norm: unknown norm {kind!r} (use 'rmsnorm' or 'layernorm')")


def rope_angles(
    positions_BxL: jax.Array, head_dim: int, theta: float, max_len: int
) -> tuple[jax.Array, jax.Array]:
    """Sine and cosine [B, L, 1, K/2] of RoPE's angles, looked up in a float32 table.

    The table (positions 0..max_len-1) is a compile-time constant, so no layer recomputes
    sines and cosines: XLA would otherwise redo them inside every layer's q and k fusion.
    """
    freqs_K2 = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    angles_PxK2 = np.arange(max_len, dtype=np.float32)[:, None] * freqs_K2
    sin_BxLxK2 = jnp.asarray(np.sin(angles_PxK2))[positions_BxL]
    cos_BxLxK2 = jnp.asarray(np.cos(angles_PxK2))[positions_BxL]
    return sin_BxLxK2[:, :, None, :], cos_BxLxK2[:, :, None, :]


def rotary_embedding(x_BxLxHxK: jax.Array, rope: tuple[jax.Array, jax.Array]) -> jax.Array:
    """Rotates channel pairs (i, i + K/2) by the angles of `rope_angles` (RoPE, "rotate_half" layout)."""
    sin, cos = rope
    k = x_BxLxHxK.shape[-1]
    x = x_BxLxHxK.astype(jnp.float32)
    x1, x2 = x[..., : k // 2], x[..., k // 2 :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BxLxHxK.dtype)


@jax.custom_vjp
def swiglu(gate_BxLxF: jax.Array, up_BxLxF: jax.Array) -> jax.Array:
    """silu(gate) * up, with its gradient written out from the two inputs alone: autodiff keeps
    sigmoid(gate) and silu(gate) as [B, L, F] arrays, written in the forward pass and read
    back, where recomputing the sigmoid in the backward pass costs less."""
    return nn.silu(gate_BxLxF) * up_BxLxF


def _swiglu_fwd(gate_BxLxF, up_BxLxF):
    return nn.silu(gate_BxLxF) * up_BxLxF, (gate_BxLxF, up_BxLxF)


def _swiglu_bwd(residuals, grad_BxLxF):
    # the barrier keeps XLA from merging this sigmoid with the forward's (common-subexpression
    # elimination), which would write it to memory in the forward pass after all
    gate, up = jax.lax.optimization_barrier(residuals)
    sigmoid = jax.nn.sigmoid(gate)
    silu = gate * sigmoid
    grad_gate = grad_BxLxF * up * (sigmoid + silu * (1 - sigmoid))
    return grad_gate, grad_BxLxF * silu


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def embed_tokens(embedding_VxD: jax.Array, tokens_BxL: jax.Array, gradient: str = "scatter") -> jax.Array:
    """`embedding[tokens]`. Its gradient is a scatter-add of the rows' gradients ("scatter"), or
    ("one_hot") matmuls of one-hot tokens with them: under XLA's deterministic GPU ops a
    scatter-add becomes a sort of every gradient element, and the matmuls cost less."""
    if gradient == "scatter":
        return jnp.take(embedding_VxD, tokens_BxL, axis=0)
    return _embed_one_hot_gradient(embedding_VxD, tokens_BxL)


@jax.custom_vjp
def _embed_one_hot_gradient(embedding_VxD: jax.Array, tokens_BxL: jax.Array) -> jax.Array:
    return jnp.take(embedding_VxD, tokens_BxL, axis=0)


def _embed_one_hot_fwd(embedding_VxD, tokens_BxL):
    return jnp.take(embedding_VxD, tokens_BxL, axis=0), (embedding_VxD, tokens_BxL)


def _embed_one_hot_bwd(residuals, grad_BxLxD):
    embedding_VxD, tokens_BxL = residuals
    grad_VxD = one_hot_scatter_add(tokens_BxL.reshape(-1), grad_BxLxD.reshape(-1, grad_BxLxD.shape[-1]),
                                   embedding_VxD.shape[0])
    return grad_VxD.astype(embedding_VxD.dtype), None


_embed_one_hot_gradient.defvjp(_embed_one_hot_fwd, _embed_one_hot_bwd)


def one_hot_scatter_add(ids_N: jax.Array, rows_NxD: jax.Array, num_rows: int) -> jax.Array:
    """[num_rows, D] float32 sums of `rows` by id, as matmuls of bfloat16 one-hot ids with the rows
    split into a bfloat16 high and low part (about 16 bits of mantissa), float32 accumulation, in
    chunks whose one-hot matrix fills at most ONE_HOT_CHUNK_BYTES. The same sum on every run."""
    n, d = rows_NxD.shape
    chunk = max(8, min(n, ONE_HOT_CHUNK_BYTES // (2 * num_rows)) // 8 * 8)
    count = -(-n // chunk)
    pad = count * chunk - n
    ids = jnp.pad(ids_N, (0, pad), constant_values=-1).reshape(count, chunk)  # -1: a one-hot row of zeros
    rows = jnp.pad(rows_NxD.astype(jnp.float32), ((0, pad), (0, 0))).reshape(count, chunk, d)

    def add_chunk(total_VxD, xs):
        ids_C, rows_CxD = xs
        one_hot_CxV = jax.nn.one_hot(ids_C, num_rows, dtype=jnp.bfloat16)
        high_CxD = rows_CxD.astype(jnp.bfloat16)
        low_CxD = (rows_CxD - high_CxD.astype(jnp.float32)).astype(jnp.bfloat16)
        for part_CxD in (high_CxD, low_CxD):
            total_VxD = total_VxD + jnp.dot(one_hot_CxV.T, part_CxD, preferred_element_type=jnp.float32)
        return total_VxD, None

    return jax.lax.scan(add_chunk, jnp.zeros((num_rows, d), jnp.float32), (ids, rows))[0]


@flax.struct.dataclass
class KVCache:
    """One layer's keys and values for S slots ([B, S, H, K], as the layer computes them), and the
    slot (an int32 scalar) where the next tokens' keys and values go (`model.decode`)."""

    k_BxSxHxK: jax.Array
    v_BxSxHxK: jax.Array
    start: jax.Array

    def write(self, k_BxTxHxK: jax.Array, v_BxTxHxK: jax.Array) -> "KVCache":
        """The cache with the keys and values of T new tokens in slots start .. start+T-1."""
        at = (0, self.start, 0, 0)
        return self.replace(k_BxSxHxK=jax.lax.dynamic_update_slice(self.k_BxSxHxK, k_BxTxHxK.astype(self.k_BxSxHxK.dtype), at),
                            v_BxSxHxK=jax.lax.dynamic_update_slice(self.v_BxSxHxK, v_BxTxHxK.astype(self.v_BxSxHxK.dtype), at))


class Attention(nn.Module):
    """Multi-head self-attention with RoPE; softmax in float32; `implementation` a `model.attention` kind.

    With a `cache`, the T new tokens' keys and values are written into it and the queries attend
    over all its S slots (`mask` is then [B, 1, T, S]); the updated cache comes back beside the output."""

    num_heads: int
    dtype: Dtype
    implementation: str = "auto"

    @nn.compact
    def __call__(self, x_BxLxD: jax.Array, rope: tuple[jax.Array, jax.Array], mask: attention.Mask,
                 cache: KVCache | None = None) -> tuple[jax.Array, KVCache | None]:
        d = x_BxLxD.shape[-1]
        k = d // self.num_heads
        qkv = nn.DenseGeneral(
            (3, self.num_heads, k), use_bias=False, dtype=self.dtype,
            kernel_init=dense_init("embed", None, "heads", "kv"), name="qkv",
        )(x_BxLxD)
        # split, not indexing: its gradient is one concatenate (indexing's is a padded copy per slice)
        q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = (x[:, :, 0] for x in jnp.split(qkv, 3, axis=2))
        q_BxLxHxK = rotary_embedding(q_BxLxHxK, rope)
        k_BxLxHxK = rotary_embedding(k_BxLxHxK, rope)
        if cache is None:
            out_BxLxHxK = attention.attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, self.implementation)
        else:  # decoding: a few queries over the cache's slots, the reference kernel's numbers on every backend
            cache = cache.write(k_BxLxHxK, v_BxLxHxK)
            out_BxLxHxK = attention.reference_attention(q_BxLxHxK, cache.k_BxSxHxK, cache.v_BxSxHxK,
                                                        mask.allowed_Bx1xLxL)
        return nn.DenseGeneral(
            d, axis=(-2, -1), use_bias=False, dtype=self.dtype,
            kernel_init=dense_init("heads", "kv", "embed"), name="out",
        )(out_BxLxHxK), cache


class Mlp(nn.Module):
    """SwiGLU (gate * silu) or plain GELU feed-forward block."""

    d_ff: int
    kind: str
    dtype: Dtype

    @nn.compact
    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        d = x_BxLxD.shape[-1]
        if self.kind == "swiglu":
            gate_up = nn.DenseGeneral(
                (2, self.d_ff), use_bias=False, dtype=self.dtype,
                kernel_init=dense_init("embed", None, "mlp"), name="gate_up",
            )(x_BxLxD)
            gate_BxLx1xF, up_BxLx1xF = jnp.split(gate_up, 2, axis=2)  # gradient: a concatenate
            h_BxLxF = swiglu(gate_BxLx1xF[:, :, 0], up_BxLx1xF[:, :, 0])
        elif self.kind == "gelu":
            h_BxLxF = nn.gelu(
                nn.Dense(self.d_ff, use_bias=False, dtype=self.dtype, kernel_init=dense_init("embed", "mlp"), name="up")(
                    x_BxLxD
                ),
                approximate=False,
            )
        else:
            raise ValueError(f"config key model.mlp: unknown MLP {self.kind!r} (use 'swiglu' or 'gelu')")
        return nn.Dense(d, use_bias=False, dtype=self.dtype, kernel_init=dense_init("mlp", "embed"), name="down")(
            h_BxLxF
        )
