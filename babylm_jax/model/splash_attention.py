"""Pallas splash attention (TPU): flash attention in blocks, never a [B, H, L, L] array.

    out_BxLxHxK = splash_attention(q, k, v, segment_ids_BxL, rows="causal")
    out_BxLxHxK = splash_kernel(q, k, v, mask)   # the "splash" backend of model.attention

`rows` says which mask every row of the batch takes, statically: "causal", "bidirectional",
or "mixed" (the hybrid's batches, causal where `causal_B`): a mixed batch runs both kernels
and keeps each row's own, twice the attention FLOPs of one kernel. Packed documents are kept
apart by segment ids (0 = padding, which sees only padding, so no row is empty), as in
`attention.attention_mask`. The kernel is a TPU (Mosaic) kernel; `interpret=True` runs the
same kernel code on any backend (how the tests check it on a CPU). Under a mesh context
(`jax.set_mesh`) the batch is split over the mesh's batch axes with `shard_map`,
since XLA cannot partition a Pallas call itself.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mask_info_lib
from jax.sharding import PartitionSpec as P

from babylm_jax.config.training import BATCH_AXES
from babylm_jax.model import attention

ROWS = ("causal", "bidirectional", "mixed")
MAX_BLOCK = 512  # MaxText's default splash block; shorter rows take one block


def block_size(seq_len: int) -> int:
    """The block of queries and keys for rows of `seq_len`: a multiple of 128 dividing it."""
    if seq_len % 128:
        raise ValueError(f"splash attention needs rows whose length is a multiple of 128 (got {seq_len}); "
                         "set model.attention='xla' for this length")
    return max(b for b in range(128, min(MAX_BLOCK, seq_len) + 1, 128) if seq_len % b == 0)


@functools.lru_cache(maxsize=None)
def _kernel(causal: bool, num_heads: int, seq_len: int, interpret: bool) -> kernel_lib.SplashAttentionKernel:
    """The splash kernel over [H, L, K] inputs for one row (vmapped over the batch), cached by shape.

    It is `kernel_lib.make_splash_mha` with its mask tables left as the numpy arrays the library computes
    them as: constants in every world. The library moves them onto a device with `jnp.array`, which under a
    jit or shard_map trace makes that trace's tracers (leaked into every later call of the cached kernel),
    and under a TPU topology's compile-only devices (`python -m babylm_jax.aot`) has no device to run on."""
    shape = (seq_len, seq_len)
    heads = mask_lib.MultiHeadMask([mask_lib.CausalMask(shape) if causal else mask_lib.FullMask(shape)] * num_heads)
    block = block_size(seq_len)
    blocks = kernel_lib.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                                   block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block,
                                   block_kv_dq=block)
    one_shard = dict(head_shards=1, q_seq_shards=1)
    fwd_tables, mask_function = mask_info_lib.process_mask(heads, (block, block), **one_shard)
    dq_tables, _ = mask_info_lib.process_mask(heads, (blocks.block_q_dq, blocks.block_kv_dq), **one_shard)
    dkv_tables, _ = mask_info_lib.process_mask_dkv(heads, (blocks.block_q_dkv, blocks.block_kv_dkv), **one_shard)
    return kernel_lib.SplashAttentionKernel(
        fwd_tables, dq_tables, dkv_tables, block_sizes=blocks, is_mqa=False, save_residuals=False,
        mask_value=kernel_lib.DEFAULT_MASK_VALUE, attn_logits_soft_cap=None, residual_checkpoint_name=None,
        mask_function=mask_function, interpret=interpret)


def _attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B, rows: str, interpret: bool):
    _, seq_len, num_heads, head_dim = q_BxLxHxK.shape
    q_BxHxLxK = jnp.swapaxes(q_BxLxHxK * jnp.asarray(head_dim**-0.5, q_BxLxHxK.dtype), 1, 2)
    k_BxHxLxK, v_BxHxLxK = jnp.swapaxes(k_BxLxHxK, 1, 2), jnp.swapaxes(v_BxLxHxK, 1, 2)

    def run(causal: bool) -> jax.Array:
        kernel = _kernel(causal, num_heads, seq_len, interpret)
        one_row = lambda q, k, v, s: kernel(q, k, v, segment_ids=kernel_lib.SegmentIds(q=s, kv=s))
        return jax.vmap(one_row)(q_BxHxLxK, k_BxHxLxK, v_BxHxLxK, segment_ids_BxL)

    if rows == "mixed":
        out_BxHxLxK = jnp.where(causal_B[:, None, None, None], run(True), run(False))
    else:
        out_BxHxLxK = run(rows == "causal")
    return jnp.swapaxes(out_BxHxLxK, 1, 2)


def splash_attention(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array,
                     segment_ids_BxL: jax.Array, rows: str, causal_B: jax.Array | None = None,
                     interpret: bool = False) -> jax.Array:
    """Softmax(q k^T / sqrt(K), masked) v; the mask as `attention.attention_mask(segment_ids, causal_B)`."""
    if rows not in ROWS:
        raise ValueError(f"splash attention rows={rows!r}: choose from {', '.join(ROWS)}")
    if causal_B is None:
        causal_B = jnp.full(segment_ids_BxL.shape[:1], rows == "causal")
    segment_ids_BxL = segment_ids_BxL.astype(jnp.int32)
    attend = functools.partial(_attend, rows=rows, interpret=interpret)
    mesh = jax.sharding.get_abstract_mesh()
    axes = tuple(a for a in BATCH_AXES if not mesh.empty and a in mesh.axis_names)
    if not axes:
        return attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B)
    rows_spec = P(axes)
    args = (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B)
    if jax.sharding.AxisType.Explicit in mesh.axis_types:  # explicit sharding: say where each input goes
        args = tuple(jax.sharding.reshard(a, rows_spec) for a in args)
    return jax.shard_map(attend, mesh=mesh, in_specs=(rows_spec,) * 5, out_specs=rows_spec, check_vma=False)(*args)


def splash_kernel(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: attention.Mask,
                  interpret: bool = False) -> jax.Array:
    """The "splash" backend: rows whose length is a multiple of 128 (shorter rows, e.g. an early
    curriculum stage, run XLA's attention); the mask must be built with `attention.Mask.of`."""
    if q_BxLxHxK.shape[1] % 128:
        return attention.xla_kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask)
    if mask.segment_ids_BxL is None:
        raise ValueError("splash attention needs the mask's segment ids: build it with Mask.of")
    return splash_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask.segment_ids_BxL, mask.rows, mask.causal_B,
                            interpret=interpret)
