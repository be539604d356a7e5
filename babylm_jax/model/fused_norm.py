"""Residual add, norm and cast in one pass: Pallas kernels (Triton on a GPU, interpret mode on a CPU).

    stream_NxD, normed_NxD = add_norm(x_NxD, h_NxD, scale_D, bias_D, rms=False, eps=1e-6, out_dtype=bf16)

`model.norm_kernel="pallas"`: the block's `x + h` (the float32 residual stream plus a sublayer's
output) and the norm of the sum, cast to the compute dtype, read and written once (`h` None: the norm
alone). Its backward is one kernel too: the norm's gradient added to the stream's, the scale and bias
gradients as per-block partial sums that XLA adds up. Rows go in blocks of ROWS, each row whole, read
in column chunks of a power of two (Triton's loads); statistics in float32. Same numbers as
`layers.LayerNorm` / `layers.RMSNorm` of the sum, within float32 rounding.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

ROWS = 16  # rows per program


def _chunk(width: int) -> int:
    """The largest power of two that divides `width`, at most 256: the columns one load reads."""
    return min(256, width & -width)


def _row_mean(src, width, chunk):
    """Each row's float32 mean, the row read in chunks."""
    total = jnp.zeros((src.shape[0],), jnp.float32)
    for k in range(width // chunk):
        total = total + jnp.sum(src[:, pl.ds(k * chunk, chunk)].astype(jnp.float32), axis=1)
    return total / width


def _forward_kernel(*refs, has_add, rms, eps, chunk):
    if has_add:
        x_ref, h_ref, scale_ref, bias_ref, y_ref, out_ref, mean_ref, rstd_ref = refs
        for k in range(x_ref.shape[1] // chunk):  # the stream: x + h, written once
            cols = pl.ds(k * chunk, chunk)
            y_ref[:, cols] = x_ref[:, cols] + h_ref[:, cols].astype(jnp.float32)
        src = y_ref
    else:
        x_ref, scale_ref, bias_ref, out_ref, mean_ref, rstd_ref = refs
        src = x_ref
    width = src.shape[1]
    mean = jnp.zeros((src.shape[0],), jnp.float32) if rms else _row_mean(src, width, chunk)
    total = jnp.zeros_like(mean)
    for k in range(width // chunk):  # variance around the mean (two passes: no cancellation)
        x = src[:, pl.ds(k * chunk, chunk)].astype(jnp.float32) - mean[:, None]
        total = total + jnp.sum(x * x, axis=1)
    rstd = jax.lax.rsqrt(total / width + eps)
    for k in range(width // chunk):
        cols = pl.ds(k * chunk, chunk)
        x = (src[:, cols].astype(jnp.float32) - mean[:, None]) * rstd[:, None]
        out_ref[:, cols] = (x * scale_ref[cols] + bias_ref[cols]).astype(out_ref.dtype)
    mean_ref[...], rstd_ref[...] = mean, rstd


def _backward_kernel(*refs, chunk, has_add, rms):
    if has_add:  # the stream's gradient comes in, and the sublayer's (the same, in its dtype) goes out too
        y_ref, g_ref, gy_ref, scale_ref, mean_ref, rstd_ref, gx_ref, gh_ref, gscale_ref, gbias_ref = refs
    else:
        y_ref, g_ref, scale_ref, mean_ref, rstd_ref, gx_ref, gscale_ref, gbias_ref = refs
    width = y_ref.shape[1]
    mean, rstd = mean_ref[...], rstd_ref[...]
    a, b = jnp.zeros_like(mean), jnp.zeros_like(mean)  # row sums of dxhat and dxhat * xhat
    for k in range(width // chunk):
        cols = pl.ds(k * chunk, chunk)
        xhat = (y_ref[:, cols] - mean[:, None]) * rstd[:, None]
        g = g_ref[:, cols].astype(jnp.float32)
        dxhat = g * scale_ref[cols]
        a, b = a + jnp.sum(dxhat, axis=1), b + jnp.sum(dxhat * xhat, axis=1)
        gscale_ref[0, cols] = jnp.sum(g * xhat, axis=0)
        gbias_ref[0, cols] = jnp.sum(g, axis=0)
    a, b = (a * 0.0 if rms else a / width), b / width  # RMSNorm: no mean, so no mean's gradient
    for k in range(width // chunk):
        cols = pl.ds(k * chunk, chunk)
        xhat = (y_ref[:, cols] - mean[:, None]) * rstd[:, None]
        dxhat = g_ref[:, cols].astype(jnp.float32) * scale_ref[cols]
        gx = rstd[:, None] * (dxhat - a[:, None] - xhat * b[:, None])
        if has_add:
            gx = gx + gy_ref[:, cols]
            gh_ref[:, cols] = gx.astype(gh_ref.dtype)
        gx_ref[:, cols] = gx


def _specs(width, n_row_arrays, n_vectors):
    row = pl.BlockSpec((ROWS, width), lambda i: (i, 0))
    vec = pl.BlockSpec((width,), lambda i: (0,))
    return [row] * n_row_arrays + [vec] * n_vectors


def _forward(x, h, scale, bias, rms, eps, out_dtype, interpret):
    n, width = x.shape
    stats = [jax.ShapeDtypeStruct((n,), jnp.float32)] * 2
    out = ([jax.ShapeDtypeStruct((n, width), jnp.float32)] if h is not None else []) + [
        jax.ShapeDtypeStruct((n, width), out_dtype)] + stats
    stat_spec = pl.BlockSpec((ROWS,), lambda i: (i,))
    operands = (x, h, scale, bias) if h is not None else (x, scale, bias)
    kernel = functools.partial(_forward_kernel, has_add=h is not None, rms=rms, eps=eps, chunk=_chunk(width))
    return pl.pallas_call(
        kernel, grid=(n // ROWS,), in_specs=_specs(width, len(operands) - 2, 2),
        out_specs=_specs(width, len(out) - 2, 0) + [stat_spec] * 2, out_shape=out, interpret=interpret,
        name="fused_add_norm" if h is not None else "fused_norm",
        compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=1),
    )(*operands)


def _backward(y, g, gy, h_dtype, scale, mean, rstd, rms, interpret):
    """(grad of the stream, [grad of the sublayer output when `gy` is given], scale and bias partial sums)."""
    n, width = y.shape
    blocks = n // ROWS
    stat_spec = pl.BlockSpec((ROWS,), lambda i: (i,))
    partial_spec = pl.BlockSpec((1, width), lambda i: (i, 0))
    has_add = gy is not None
    rows = (y, g, gy) if has_add else (y, g)
    grads = [jax.ShapeDtypeStruct((n, width), jnp.float32)] + (
        [jax.ShapeDtypeStruct((n, width), h_dtype)] if has_add else [])
    return pl.pallas_call(
        functools.partial(_backward_kernel, chunk=_chunk(width), has_add=has_add, rms=rms),
        grid=(blocks,), in_specs=_specs(width, len(rows), 1) + [stat_spec] * 2,
        out_specs=_specs(width, len(grads), 0) + [partial_spec] * 2,
        out_shape=grads + [jax.ShapeDtypeStruct((blocks, width), jnp.float32)] * 2,
        interpret=interpret, name="fused_norm_grad",
        compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=1),
    )(*rows, scale, mean, rstd)


def _rows(a, pad):
    return jnp.pad(a.reshape(-1, a.shape[-1]), ((0, pad), (0, 0)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def add_norm(x: jax.Array, h: jax.Array | None, scale: jax.Array, bias: jax.Array, rms: bool, eps: float,
             out_dtype: Any, interpret: bool) -> tuple[jax.Array, jax.Array]:
    """(x + h in x's dtype, norm(x + h) in `out_dtype`) over the last axis; with `h` None, (x, norm(x)).
    LayerNorm, or RMSNorm with `rms` (`bias` then zeros and no gradient)."""
    return _add_norm_fwd(x, h, scale, bias, rms, eps, out_dtype, interpret)[0]


def _add_norm_fwd(x, h, scale, bias, rms, eps, out_dtype, interpret):
    shape, width = x.shape, x.shape[-1]
    n = x.size // width
    pad = -n % ROWS
    rows_h = None if h is None else _rows(h, pad)
    outs = _forward(_rows(x.astype(jnp.float32), pad), rows_h, scale.astype(jnp.float32),
                    bias.astype(jnp.float32), rms, eps, out_dtype, interpret)
    *stream, normed, mean, rstd = outs
    y = stream[0] if h is not None else _rows(x.astype(jnp.float32), pad)
    result = (y[:n].reshape(shape).astype(x.dtype) if h is not None else x, normed[:n].reshape(shape))
    return result, (y, h, scale, bias, mean, rstd)


def _add_norm_bwd(rms, eps, out_dtype, interpret, residuals, cotangents):
    y, h, scale, bias, mean, rstd = residuals
    g_stream, g_normed = cotangents
    shape, width = g_normed.shape, g_normed.shape[-1]
    n = g_normed.size // width
    pad = y.shape[0] - n
    gy_rows = None if h is None else _rows(g_stream.astype(jnp.float32), pad)
    *grads, gscale, gbias = _backward(y, _rows(g_normed, pad), gy_rows, None if h is None else h.dtype,
                                      scale.astype(jnp.float32), mean, rstd, rms, interpret)
    grad_x = grads[0][:n].reshape(shape).astype(g_stream.dtype)
    if h is None:  # the output x is x itself: its gradient adds here (XLA drops the zeros of an unused output)
        grad_x = grad_x + g_stream
    grad_h = None if h is None else grads[1][:n].reshape(shape)
    grad_bias = jnp.zeros_like(bias) if rms else jnp.sum(gbias, axis=0).astype(bias.dtype)
    return grad_x, grad_h, jnp.sum(gscale, axis=0).astype(scale.dtype), grad_bias


add_norm.defvjp(_add_norm_fwd, _add_norm_bwd)


class FusedNorm(nn.Module):
    """`layers.LayerNorm` / `layers.RMSNorm` (the same parameters) by `add_norm`: `norm(x)`, or with
    `add`, `(x + add, norm(x + add))` in one pass. `interpret`: the CPU's interpret mode."""

    rms: bool
    dtype: Any = jnp.float32
    interpret: bool = False
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x_BxLxD: jax.Array, add: jax.Array | None = None) -> Any:
        d = x_BxLxD.shape[-1]
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)), (d,))
        bias = (jnp.zeros((d,), jnp.float32) if self.rms else
                self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)), (d,)))
        stream, normed = add_norm(x_BxLxD, add, scale, bias, self.rms, self.eps, self.dtype, self.interpret)
        return normed if add is None else (stream, normed)
