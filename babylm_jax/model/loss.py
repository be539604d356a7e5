"""The cross-entropy of a model's output projection, and its kernels (`train.loss_kernel`).

    loss_sum = projected_loss("xla", x_NxD, embed_VxD, targets_N, weights_N, z_loss, chunk)

`cross_entropy` is the definition, from full [B, L, V] logits. The kernels compute the same sum
without an [N, V] array, each a custom VJP, which training and the eval loss use
(`objectives.compute_loss`):
- "xla", `projected_cross_entropy`: `chunk` rows of `x @ embed.T` at a time, each chunk's gradient
  formed in the forward pass (`loss_chunk` picks the rows per chunk for a backend);
- "blockwise", `blockwise_cross_entropy`: all rows against one block of the vocabulary at a time,
  the log-sum-exp carried from block to block, each block recomputed in the backward pass (memory
  bounded by a block; a block's logits still pass through memory);
- "pallas", `fused_loss.fused_cross_entropy`: kernels that keep each tile of logits on chip.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from babylm_jax.model.fused_loss import fused_cross_entropy

LOSS_CHUNK = 256  # rows of logits per chunk of the loss on CPU: 256 x a vocabulary of 6,000 in f32 is 6 MB
ACCELERATOR_CHUNK_BYTES = 256 * 2**20  # on GPU/TPU a chunk's f32 logits fill this much: fewer, larger matmuls
BLOCKWISE_BYTES = 256 * 2**20  # "blockwise": a vocabulary block's f32 logits of all rows fill at most this much


def loss_chunk(platform: str, vocab_size: int, configured: int = 0) -> int:
    """Rows per chunk of the loss: `configured` (train.loss_chunk) when set, else per backend:
    LOSS_CHUNK on CPU (a chunk's logits stay in cache), and on accelerators the rows whose f32
    logits fill ACCELERATOR_CHUNK_BYTES (a multiple of 256, from 1,024 to 16,384)."""
    if configured > 0:
        return configured
    if platform == "cpu":
        return LOSS_CHUNK
    rows = ACCELERATOR_CHUNK_BYTES // (4 * vocab_size) // 256 * 256
    return int(min(16_384, max(1_024, rows)))


def cross_entropy(
    logits_BxLxV: jax.Array, targets_BxL: jax.Array, weights_BxL: jax.Array, z_loss: float = 0.0
) -> tuple[jax.Array, jax.Array]:
    """Summed float32 cross-entropy (+ z-loss) over weighted positions, and the weight total.

    The definition from full logits; training uses `projected_cross_entropy`, which tests
    check against this."""
    logits = logits_BxLxV.astype(jnp.float32)
    log_z_BxL = jax.nn.logsumexp(logits, axis=-1)
    target_logit_BxL = jnp.take_along_axis(logits, targets_BxL[..., None], axis=-1)[..., 0]
    loss_BxL = log_z_BxL - target_logit_BxL + z_loss * jnp.square(log_z_BxL)
    weights = weights_BxL.astype(jnp.float32)
    return jnp.sum(loss_BxL * weights), jnp.sum(weights)


def _chunked(x: jax.Array, chunk: int, groups: int) -> jax.Array:
    """[N, ...] -> [C, G * M, ...]: the rows as `groups` contiguous blocks (the devices' shares
    of a batch-sharded array), each split into C chunks of M <= chunk rows (M a multiple of 8
    where possible, zero-padded at the end); chunk c holds the c-th chunk of every block, so a
    scan over C leaves each block's rows on its device."""
    n = x.shape[0] // groups
    count = -(-n // chunk)
    per_chunk = -(-n // count)
    rows = min(chunk, -(-per_chunk // 8) * 8)
    rest = x.shape[1:]
    x = jnp.pad(x.reshape(groups, n, *rest), ((0, 0), (0, count * rows - n)) + ((0, 0),) * len(rest))
    return jnp.swapaxes(x.reshape(groups, count, rows, *rest), 0, 1).reshape(count, groups * rows, *rest)


def _unchunked(x_CxMxD: jax.Array, n: int, groups: int) -> jax.Array:
    """The inverse of `_chunked` for [N, D] rows: [C, G * M, D] -> [N, D], padding dropped."""
    count, _, d = x_CxMxD.shape
    x = jnp.swapaxes(x_CxMxD.reshape(count, groups, -1, d), 0, 1).reshape(groups, -1, d)
    return x[:, : n // groups].reshape(n, d)


def _chunk_terms(x_NxD, embed_VxD, targets_N, weights_N, z_loss, logits_dtype=jnp.float32):
    """One chunk's logits (accumulated in float32, kept in `logits_dtype`), their float32
    log-sum-exp, and summed weighted loss."""
    logits_NxV = jnp.dot(x_NxD, embed_VxD.T, preferred_element_type=jnp.float32).astype(logits_dtype)
    log_z_N = jax.nn.logsumexp(logits_NxV.astype(jnp.float32), axis=-1)
    target_logit_N = jnp.take_along_axis(logits_NxV, targets_N[:, None], axis=-1)[:, 0].astype(jnp.float32)
    loss = jnp.sum(weights_N * (log_z_N - target_logit_N + z_loss * jnp.square(log_z_N)))
    return logits_NxV, log_z_N, loss


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def projected_cross_entropy(
    x_NxD: jax.Array, embed_VxD: jax.Array, targets_N: jax.Array, weights_N: jax.Array, z_loss: float, chunk: int,
    groups: int = 1, matmul_dtype: Any = jnp.float32, logits_dtype: Any = jnp.float32,
) -> jax.Array:
    """Summed float32 cross-entropy (+ z-loss) of `x @ embed.T` against `targets`, weighted.

    The same number as `cross_entropy(x @ embed.T, ...)`, computed `chunk` rows at a time so
    that each chunk's [chunk, V] logits stay in cache for the log-sum-exp; no [N, V] array
    is ever built. Under differentiation the forward also forms each chunk's gradient
    (softmax - one-hot, times the weight) while its logits are in cache, and keeps only the
    [N, D] and [V, D] results for the backward pass (the loss is a sum, so its cotangent is
    one scalar): three matmuls and one pass of exponentials per chunk, as the unchunked
    gradient needs, but no logits written to or read back from memory. With `groups` > 1
    (N a multiple of it) each chunk takes `chunk` rows from each of `groups` contiguous blocks
    of rows, so that on a batch-sharded array every device projects its own rows. The three
    matmuls take their inputs in `matmul_dtype` (bfloat16 in bf16 runs) and accumulate in
    float32; log-sum-exp and loss are float32, and the logits are stored in `logits_dtype`
    (bfloat16 halves the passes over a GPU chunk's logits, which do not stay in its cache).
    """
    embed = embed_VxD.astype(matmul_dtype)
    chunks = (_chunked(x_NxD.astype(matmul_dtype), chunk, groups), _chunked(targets_N, chunk, groups),
              _chunked(weights_N.astype(jnp.float32), chunk, groups))

    def body(total, xs):
        return total + _chunk_terms(*xs[:1], embed, *xs[1:], z_loss, logits_dtype)[2], None

    return jax.lax.scan(body, jnp.zeros((), jnp.float32), chunks)[0]


def _projected_cross_entropy_fwd(x_NxD, embed_VxD, targets_N, weights_N, z_loss, chunk, groups=1,
                                 matmul_dtype=jnp.float32, logits_dtype=jnp.float32):
    embed = embed_VxD.astype(matmul_dtype)
    chunks = (_chunked(x_NxD.astype(matmul_dtype), chunk, groups), _chunked(targets_N, chunk, groups),
              _chunked(weights_N.astype(jnp.float32), chunk, groups))

    def body(carry, xs):
        total, grad_embed_VxD = carry
        x_CxD, targets_C, weights_C = xs
        logits_CxV, log_z_C, loss = _chunk_terms(x_CxD, embed, targets_C, weights_C, z_loss, logits_dtype)
        # d loss / d logits = w (1 + 2 z log_z) softmax - w one_hot(target)
        scale_C = weights_C * (1.0 + 2.0 * z_loss * log_z_C)
        is_target_CxV = jnp.arange(logits_CxV.shape[1])[None, :] == targets_C[:, None]
        grad_logits_CxV = (scale_C[:, None] * jnp.exp(logits_CxV.astype(jnp.float32) - log_z_C[:, None])
                           - jnp.where(is_target_CxV, weights_C[:, None], 0.0))
        grad_logits_CxV = grad_logits_CxV.astype(matmul_dtype)
        grad_x_CxD = jnp.dot(grad_logits_CxV, embed, preferred_element_type=jnp.float32)
        grad_embed_VxD = grad_embed_VxD + jnp.dot(grad_logits_CxV.T, x_CxD, preferred_element_type=jnp.float32)
        return (total + loss, grad_embed_VxD), grad_x_CxD

    init = (jnp.zeros((), jnp.float32), jnp.zeros(embed.shape, jnp.float32))
    (total, grad_embed_VxD), grad_x = jax.lax.scan(body, init, chunks)
    grad_x_NxD = _unchunked(grad_x, x_NxD.shape[0], groups).astype(x_NxD.dtype)
    return total, (grad_x_NxD, grad_embed_VxD.astype(embed_VxD.dtype), targets_N, weights_N)


def _projected_cross_entropy_bwd(z_loss, chunk, groups, matmul_dtype, logits_dtype, residuals, g):
    grad_x_NxD, grad_embed_VxD, targets_N, weights_N = residuals
    zero = lambda a: jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.floating) else None  # noqa: E731
    return g * grad_x_NxD, g * grad_embed_VxD, zero(targets_N), zero(weights_N)


projected_cross_entropy.defvjp(_projected_cross_entropy_fwd, _projected_cross_entropy_bwd)


def vocab_block(rows: int, vocab: int) -> int:
    """Vocabulary entries per block of "blockwise": a multiple of 8 whose f32 logits of `rows` rows
    fill at most BLOCKWISE_BYTES, at most the vocabulary (rounded up to 8)."""
    return max(8, min(BLOCKWISE_BYTES // (4 * max(rows, 1)), -(-vocab // 8) * 8) // 8 * 8)


def _vocab_blocks(embed_VxD: jax.Array, block: int) -> jax.Array:
    """[V, D] -> [V / block, block, D], zero rows padded at the end."""
    pad = -embed_VxD.shape[0] % block
    return jnp.pad(embed_VxD, ((0, pad), (0, 0))).reshape(-1, block, embed_VxD.shape[1])


def _block_logits(x_NxD, embed_BxD, index, block, vocab, logits_dtype):
    """A block's float32 logits (stored as `logits_dtype`), padded columns at -inf, and the columns' ids."""
    logits = jnp.dot(x_NxD, embed_BxD.T, preferred_element_type=jnp.float32).astype(logits_dtype).astype(jnp.float32)
    cols_B = index * block + jnp.arange(block)
    return jnp.where(cols_B[None, :] < vocab, logits, -jnp.inf), cols_B


def _blockwise_lse(x_NxD, blocks, targets_N, vocab, logits_dtype):
    """(log-sum-exp, target logit) of every row, carried over the vocabulary's blocks."""
    n, block = x_NxD.shape[0], blocks.shape[1]

    def body(carry, xs):
        m_N, s_N, t_N = carry
        index, embed_BxD = xs
        logits_NxB, cols_B = _block_logits(x_NxD, embed_BxD, index, block, vocab, logits_dtype)
        m_new = jnp.maximum(m_N, jnp.max(logits_NxB, axis=1))
        s_N = s_N * jnp.exp(m_N - m_new) + jnp.sum(jnp.exp(logits_NxB - m_new[:, None]), axis=1)
        t_N = t_N + jnp.sum(jnp.where(cols_B[None, :] == targets_N[:, None], logits_NxB, 0.0), axis=1)
        return (m_new, s_N, t_N), None

    init = (jnp.full((n,), -jnp.inf, jnp.float32), jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.float32))
    (m_N, s_N, t_N), _ = jax.lax.scan(body, init, (jnp.arange(blocks.shape[0]), blocks))
    return m_N + jnp.log(s_N), t_N


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def blockwise_cross_entropy(
    x_NxD: jax.Array, embed_VxD: jax.Array, targets_N: jax.Array, weights_N: jax.Array, z_loss: float, block: int,
    matmul_dtype: Any = jnp.float32, logits_dtype: Any = jnp.float32,
) -> jax.Array:
    """`cross_entropy(x @ embed.T, ...)` over `block` vocabulary entries at a time (levanter's blockwise
    cross-entropy): the forward carries the log-sum-exp from block to block, the backward recomputes
    each block's logits for its gradient. Matmuls in `matmul_dtype` with float32 accumulation."""
    return _blockwise_fwd(x_NxD, embed_VxD, targets_N, weights_N, z_loss, block, matmul_dtype, logits_dtype)[0]


def _blockwise_fwd(x_NxD, embed_VxD, targets_N, weights_N, z_loss, block, matmul_dtype, logits_dtype):
    x = x_NxD.astype(matmul_dtype)
    blocks = _vocab_blocks(embed_VxD.astype(matmul_dtype), block)
    lse_N, target_N = _blockwise_lse(x, blocks, targets_N, embed_VxD.shape[0], logits_dtype)
    weights = weights_N.astype(jnp.float32)
    loss = jnp.sum(weights * (lse_N - target_N + z_loss * jnp.square(lse_N)))
    return loss, (x_NxD, embed_VxD, targets_N, weights_N, lse_N)


def _blockwise_bwd(z_loss, block, matmul_dtype, logits_dtype, residuals, g):
    x_NxD, embed_VxD, targets_N, weights_N, lse_N = residuals
    x = x_NxD.astype(matmul_dtype)
    blocks = _vocab_blocks(embed_VxD.astype(matmul_dtype), block)
    weight_N = g * weights_N.astype(jnp.float32)
    scale_N = weight_N * (1.0 + 2.0 * z_loss * lse_N)

    def body(grad_x_NxD, xs):
        index, embed_BxD = xs
        logits_NxB, cols_B = _block_logits(x, embed_BxD, index, block, embed_VxD.shape[0], logits_dtype)
        grad_NxB = (scale_N[:, None] * jnp.exp(logits_NxB - lse_N[:, None])
                    - jnp.where(cols_B[None, :] == targets_N[:, None], weight_N[:, None], 0.0)).astype(matmul_dtype)
        grad_x_NxD = grad_x_NxD + jnp.dot(grad_NxB, embed_BxD, preferred_element_type=jnp.float32)
        return grad_x_NxD, jnp.dot(grad_NxB.T, x, preferred_element_type=jnp.float32)

    grad_x_NxD, grad_blocks = jax.lax.scan(body, jnp.zeros(x.shape, jnp.float32),
                                           (jnp.arange(blocks.shape[0]), blocks))
    grad_embed_VxD = grad_blocks.reshape(-1, x.shape[1])[: embed_VxD.shape[0]]
    zero = lambda a: jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.floating) else None  # noqa: E731
    return grad_x_NxD.astype(x_NxD.dtype), grad_embed_VxD.astype(embed_VxD.dtype), zero(targets_N), zero(weights_N)


blockwise_cross_entropy.defvjp(_blockwise_fwd, _blockwise_bwd)


def projected_loss(
    kernel: str, x_NxD: jax.Array, embed_VxD: jax.Array, targets_N: jax.Array, weights_N: jax.Array, z_loss: float,
    chunk: int, groups: int = 1, matmul_dtype: Any = jnp.float32, logits_dtype: Any = jnp.float32,
    interpret: bool = False,
) -> jax.Array:
    """The summed loss by `kernel` ("xla", "blockwise" or "pallas", see above). `chunk` and `groups`
    are "xla"'s row chunks; "pallas" keeps its logits in float32 on chip (no `logits_dtype`) and
    runs in interpret mode where `interpret` (the CPU)."""
    if kernel == "xla":
        return projected_cross_entropy(x_NxD, embed_VxD, targets_N, weights_N, z_loss, chunk, groups,
                                       matmul_dtype, logits_dtype)
    if kernel == "blockwise":
        block = vocab_block(x_NxD.shape[0], embed_VxD.shape[0])
        return blockwise_cross_entropy(x_NxD, embed_VxD, targets_N, weights_N, z_loss, block, matmul_dtype,
                                       logits_dtype)
    if kernel == "pallas":
        return fused_cross_entropy(x_NxD, embed_VxD, targets_N, weights_N, z_loss, matmul_dtype, interpret)
    raise ValueError(f"config key train.loss_kernel: unknown kernel {kernel!r} (use 'xla', 'blockwise' or 'pallas')")
