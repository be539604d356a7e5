"""The output projection's cross-entropy as Pallas kernels that never write the logits to memory.

    loss_sum = fused_cross_entropy(x_NxD, embed_VxD, targets_N, weights_N, z_loss, matmul_dtype, interpret)

As llm.c's fused classifier, Liger's fused linear cross-entropy and Apple's Cut Cross-Entropy: each
tile of logits goes from the matmul to its use in on-chip memory. Three kernels (Triton on a GPU,
interpret mode on a CPU), named in KERNEL_MATMULS with the [N, V, D] matmuls each runs:
- `fused_ce_lse`: per block of rows, over the vocabulary's blocks, the running log-sum-exp and the
  target's logit (one matmul);
- `fused_ce_grad_x`: per block of rows, the rows' gradient (softmax - one-hot) @ embed, the tile of
  logits recomputed (two);
- `fused_ce_grad_embed`: per block of the vocabulary, (softmax - one-hot)^T @ x over the row blocks (two).
The loss (a sum over [N] values) and its weighting stay in XLA. Rows, vocabulary and width are
zero-padded to the blocks (padded vocabulary columns masked out), the width to a power of two as
Triton's loads need (768 -> 1024).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

KERNEL_MATMULS = {"fused_ce_lse": 1, "fused_ce_grad_x": 2, "fused_ce_grad_embed": 2}  # [N, V, D] matmuls a kernel runs
TILE_ELEMENTS = 2**15  # a block of rows (or of the vocabulary) times the padded width: 64 KiB in bf16


def blocks_for(width: int) -> int:
    """Rows (and vocabulary entries) per block for a padded `width`: from 16 to 128, a power of two."""
    return max(16, min(128, TILE_ELEMENTS // width))


def _nt(a, b):  # a @ b.T, float32 accumulation
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def _tile_logits(x_ref_tile, e_tile, start, vocab):
    """A [rows, block] tile of float32 logits, the columns past `vocab` at -inf, and their ids."""
    logits = _nt(x_ref_tile, e_tile)
    cols = start + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    return jnp.where(cols < vocab, logits, -jnp.inf), cols


def _lse_kernel(x_ref, e_ref, t_ref, lse_ref, tl_ref, *, block, vocab):
    x, targets = x_ref[...], t_ref[...]
    rows = x.shape[0]

    def body(j, carry):
        m, s, t = carry
        logits, cols = _tile_logits(x, e_ref[pl.ds(j * block, block), :], j * block, vocab)
        m_new = jnp.maximum(m, jnp.max(logits, axis=1))
        s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(logits - m_new[:, None]), axis=1)
        t = t + jnp.sum(jnp.where(cols == targets[:, None], logits, 0.0), axis=1)
        return m_new, s, t

    init = (jnp.full((rows,), -jnp.inf, jnp.float32), jnp.zeros((rows,), jnp.float32), jnp.zeros((rows,), jnp.float32))
    m, s, t = jax.lax.fori_loop(0, e_ref.shape[0] // block, body, init)
    lse_ref[...] = m + jnp.log(s)
    tl_ref[...] = t


def _grad_logits(x, e, start, vocab, targets, lse, scale, weight):
    """d loss / d logits of a tile: scale * softmax - weight * one-hot, in the matmul dtype."""
    logits, cols = _tile_logits(x, e, start, vocab)
    grad = scale[:, None] * jnp.exp(logits - lse[:, None]) - jnp.where(cols == targets[:, None], weight[:, None], 0.0)
    return grad.astype(x.dtype)


def _grad_x_kernel(x_ref, e_ref, t_ref, lse_ref, scale_ref, w_ref, gx_ref, *, block, vocab):
    x, targets, lse, scale, weight = x_ref[...], t_ref[...], lse_ref[...], scale_ref[...], w_ref[...]

    def body(j, acc):
        e = e_ref[pl.ds(j * block, block), :]
        grad = _grad_logits(x, e, j * block, vocab, targets, lse, scale, weight)
        return acc + jnp.dot(grad, e, preferred_element_type=jnp.float32)

    gx_ref[...] = jax.lax.fori_loop(0, e_ref.shape[0] // block, body, jnp.zeros(x.shape, jnp.float32))


def _grad_embed_kernel(x_ref, e_ref, t_ref, lse_ref, scale_ref, w_ref, ge_ref, *, block, vocab):
    e = e_ref[...]
    start = pl.program_id(0) * e.shape[0]

    def body(i, acc):
        rows = pl.ds(i * block, block)
        x = x_ref[rows, :]
        grad = _grad_logits(x, e, start, vocab, t_ref[rows], lse_ref[rows], scale_ref[rows], w_ref[rows])
        return acc + jax.lax.dot_general(grad, x, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)

    ge_ref[...] = jax.lax.fori_loop(0, x_ref.shape[0] // block, body, jnp.zeros(e.shape, jnp.float32))


def _call(kernel, name, grid_over, block, out_rows, width, operands, interpret, **params):
    """A pallas_call over blocks of `block` rows of its first (grid_over="rows") or second operand."""
    row_spec = pl.BlockSpec((block, width), lambda i: (i, 0))
    vec_spec = pl.BlockSpec((block,), lambda i: (i,))
    whole = lambda a: pl.BlockSpec(a.shape, lambda i: (0,) * a.ndim)  # noqa: E731
    x, e, *vectors = operands
    if grid_over == "rows":
        in_specs = [row_spec, whole(e)] + [vec_spec] * len(vectors)
    else:
        in_specs = [whole(x), row_spec] + [whole(v) for v in vectors]
    n_out = len(out_rows)
    out_specs = [row_spec if shape[1:] else vec_spec for shape, _ in out_rows]
    out_shape = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in out_rows]
    return pl.pallas_call(
        functools.partial(kernel, block=block, **params), grid=((x if grid_over == "rows" else e).shape[0] // block,),
        in_specs=in_specs, out_specs=out_specs if n_out > 1 else out_specs[0],
        out_shape=out_shape if n_out > 1 else out_shape[0], interpret=interpret, name=name,
        compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=2),  # Triton, not Mosaic GPU
    )(*operands)


def _padded(x_NxD, embed_VxD, targets_N, matmul_dtype):
    width = pl.next_power_of_2(x_NxD.shape[1])
    block = blocks_for(width)
    pad = lambda a, rows, cols=0: jnp.pad(a, ((0, rows),) + ((0, cols),) * (a.ndim - 1))  # noqa: E731
    n_pad, v_pad = -x_NxD.shape[0] % block, -embed_VxD.shape[0] % block
    x = pad(x_NxD.astype(matmul_dtype), n_pad, width - x_NxD.shape[1])
    e = pad(embed_VxD.astype(matmul_dtype), v_pad, width - x_NxD.shape[1])
    return x, e, pad(targets_N.astype(jnp.int32), n_pad), block, n_pad


def _lse_and_target(x, e, targets, block, vocab, interpret):
    n, width = x.shape
    f32 = jnp.float32
    return _call(_lse_kernel, "fused_ce_lse", "rows", block, [((n,), f32), ((n,), f32)], width, (x, e, targets),
                 interpret, vocab=vocab)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def fused_cross_entropy(x_NxD: jax.Array, embed_VxD: jax.Array, targets_N: jax.Array, weights_N: jax.Array,
                        z_loss: float, matmul_dtype: Any = jnp.float32, interpret: bool = False) -> jax.Array:
    """Summed float32 cross-entropy (+ z-loss) of `x @ embed.T` against `targets`, weighted: the number
    `loss.cross_entropy` gives, from kernels that keep each tile of logits on chip (float32)."""
    return _fused_fwd(x_NxD, embed_VxD, targets_N, weights_N, z_loss, matmul_dtype, interpret)[0]


def _fused_fwd(x_NxD, embed_VxD, targets_N, weights_N, z_loss, matmul_dtype, interpret):
    x, e, targets, block, n_pad = _padded(x_NxD, embed_VxD, targets_N, matmul_dtype)
    lse, target_logit = _lse_and_target(x, e, targets, block, embed_VxD.shape[0], interpret)
    n = x_NxD.shape[0]
    weights = weights_N.astype(jnp.float32)
    lse_N = lse[:n]
    loss = jnp.sum(weights * (lse_N - target_logit[:n] + z_loss * jnp.square(lse_N)))
    return loss, (x_NxD, embed_VxD, targets_N, weights_N, lse)


def _fused_bwd(z_loss, matmul_dtype, interpret, residuals, g):
    x_NxD, embed_VxD, targets_N, weights_N, lse = residuals
    x, e, targets, block, n_pad = _padded(x_NxD, embed_VxD, targets_N, matmul_dtype)
    weight = jnp.pad(g * weights_N.astype(jnp.float32), (0, n_pad))
    scale = weight * (1.0 + 2.0 * z_loss * lse)
    operands = (x, e, targets, lse, scale, weight)
    vocab, width = embed_VxD.shape[0], x.shape[1]
    grad_x = _call(_grad_x_kernel, "fused_ce_grad_x", "rows", block, [(x.shape, jnp.float32)], width, operands,
                   interpret, vocab=vocab)
    grad_e = _call(_grad_embed_kernel, "fused_ce_grad_embed", "vocab", block, [(e.shape, jnp.float32)], width,
                   operands, interpret, vocab=vocab)
    n, (v, d) = x_NxD.shape[0], embed_VxD.shape
    zero = lambda a: jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.floating) else None  # noqa: E731
    return (grad_x[:n, :d].astype(x_NxD.dtype), grad_e[:v, :d].astype(embed_VxD.dtype), zero(targets_N),
            zero(weights_N))


fused_cross_entropy.defvjp(_fused_fwd, _fused_bwd)
