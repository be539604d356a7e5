"""Softmax attention by backend (`model.attention`): one mask, and the kernels of `core.attention_backends` in KERNELS.

    kind = resolve("auto", "cuda", jnp.bfloat16)      # -> "cudnn"
    out_BxLxHxK = attend(q, k, v, Mask.of(segment_ids_BxL, causal=True), kind)

The backends (one table, `core.attention_backends.ATTENTION_BACKENDS`):
- "reference": plain jnp with a written-out (flash-attention) backward, tuned for the CPU;
  it materialises the float32 [B, H, L, L] scores and probabilities.
- "xla": `jax.nn.dot_product_attention(implementation="xla")` (autodiff gradient).
- "cudnn": cuDNN's fused flash attention (`implementation="cudnn"`, bf16/fp16 only); the
  segment and per-row causal mask goes in as a [B, 1, L, L] bias, and all-causal batches
  also tell cuDNN to skip the upper triangle.
- "splash": Pallas splash attention on TPU (`splash_attention`): blocks of queries and
  keys from the segment ids, never the [B, H, L, L] scores; the hybrid's mixed rows run the
  causal and the bidirectional kernel and keep each row's own, twice the attention FLOPs of
  one kernel. The kernel is a TPU (Mosaic) kernel; `interpret=True` runs the same kernel code
  on any backend (how the tests check it on a CPU). Under a mesh context (`jax.set_mesh`) the
  batch is split over the mesh's batch axes with `shard_map`, since XLA cannot partition a
  Pallas call itself.
- "auto": cuDNN on CUDA in bf16, splash on TPU, the reference on CPU (the faster there:
  experiments/benchmarks/attention_backends.py), XLA elsewhere.
Every path takes the same mask: packed documents (segment ids), causal, bidirectional and
the hybrid's mixed rows.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mask_info_lib
from jax.sharding import PartitionSpec as P

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.training import BATCH_AXES
from babylm_jax.core.attention_backends import ATTENTION_BACKENDS, AUTO, AUTO_FALLBACK, attention_kinds

Kernel = Callable[..., jax.Array]  # (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, interpret) -> out_BxLxHxK
SPLASH_ROWS = ("causal", "bidirectional", "mixed")
SPLASH_MAX_BLOCK = 512  # MaxText's default splash block; shorter rows take one block


@flax.struct.dataclass
class Mask:
    """Which keys each query may see ([B, 1, L, L] bool); `all_causal` (static) when every row is causal.

    Built with `Mask.of`, it also carries what the mask is made of, for kernels that never build
    it (splash): the segment ids, which rows are causal, and `rows` (static: "causal",
    "bidirectional" or "mixed")."""

    allowed_Bx1xLxL: jax.Array
    all_causal: bool = flax.struct.field(pytree_node=False, default=False)
    segment_ids_BxL: jax.Array | None = None
    causal_B: jax.Array | None = None
    rows: str = flax.struct.field(pytree_node=False, default="mixed")

    @classmethod
    def of(cls, segment_ids_BxL: jax.Array, causal: bool | jax.Array) -> "Mask":
        """The mask of packed rows (segment ids, 0 = padding), causal where `causal` (a bool for
        every row, or a [B] array: the hybrid's mixed rows)."""
        causal_B = jnp.broadcast_to(jnp.asarray(causal, dtype=bool), segment_ids_BxL.shape[:1])
        rows = "causal" if causal is True else "bidirectional" if causal is False else "mixed"
        return cls(attention_mask(segment_ids_BxL, causal_B), all_causal=causal is True,
                   segment_ids_BxL=segment_ids_BxL, causal_B=causal_B, rows=rows)


def attention_mask(segment_ids_BxL: jax.Array, causal_B: jax.Array) -> jax.Array:
    """[B, 1, L, L] boolean mask: same segment, and key <= query on rows where `causal_B`.

    Segment id 0 marks padding; padding attends only to padding, so no row is empty.
    """
    length = segment_ids_BxL.shape[1]
    same_segment = segment_ids_BxL[:, :, None] == segment_ids_BxL[:, None, :]
    lower = jnp.tril(jnp.ones((length, length), dtype=bool))
    allowed = jnp.where(causal_B[:, None, None], lower[None], True)
    return (same_segment & allowed)[:, None]


def platform_of(backend: str) -> str:
    """The lowering platform of a JAX backend name ("gpu" -> "cuda", or "rocm" on AMD)."""
    if backend != "gpu":
        return backend
    version = getattr(jax.devices()[0].client, "platform_version", "")
    return "rocm" if "rocm" in version.lower() else "cuda"


def resolve(kind: str, platform: str, dtype: Any) -> str:
    """The backend `kind` ("auto" or a backend, as config.model checked it) runs as on `platform`
    for compute `dtype`; ValueError (naming model.attention and the choices) for one the
    platform or the dtype cannot run."""
    dtype_name = jnp.dtype(dtype).name
    if kind == AUTO:
        return next((name for name, backend in ATTENTION_BACKENDS.items()
                     if platform in backend.auto_on and dtype_name in backend.dtypes), AUTO_FALLBACK)
    backend = ATTENTION_BACKENDS[kind]
    if platform not in backend.platforms:
        needs = backend.needs or f"a platform of {', '.join(backend.platforms)}"
        choices = [name for name in attention_kinds() if name == AUTO or platform in ATTENTION_BACKENDS[name].platforms]
        raise ValueError(f"config key model.attention={kind!r} needs {needs}, and this run's platform is "
                         f"{platform} (choices there: {', '.join(choices)})")
    if dtype_name not in backend.dtypes:
        raise ValueError(f"config key model.attention={kind!r} needs model.dtype={backend.dtypes[0]!r} (it has no "
                         f"{dtype_name} kernel); use model.attention={AUTO_FALLBACK!r} for {dtype_name}")
    return kind


def for_platform(config: ModelConfig, platform: str, strict: bool = True) -> ModelConfig:
    """`config` with model.attention resolved for `platform`: ValueError if it cannot run there,
    or (not `strict`: a trained model loaded elsewhere, the same numbers) what "auto" takes there."""
    try:
        kind = resolve(config.attention, platform, config.compute_dtype)
    except ValueError:
        if strict:
            raise
        kind = resolve("auto", platform, config.compute_dtype)
    return dataclasses.replace(config, attention=kind)


def attend(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: Mask, kind: str,
           interpret: bool = False) -> jax.Array:
    """Softmax(q k^T / sqrt(K), masked) v with backend `kind` ("auto": for the running backend);
    `interpret` runs a Pallas kernel (splash) on any backend (tests)."""
    if kind == AUTO:
        kind = resolve(kind, platform_of(jax.default_backend()), q_BxLxHxK.dtype)
    return kernel(kind)(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, interpret)


def kernel(kind: str) -> Kernel:
    """The kernel function of backend `kind` (a key of KERNELS)."""
    return KERNELS[kind]


def xla_kernel(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: Mask,
               interpret: bool = False) -> jax.Array:
    """The "xla" backend: XLA's attention, the [B, 1, L, L] mask as given."""
    return jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask=mask.allowed_Bx1xLxL,
                                        implementation="xla")


def cudnn_kernel(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: Mask,
                 interpret: bool = False) -> jax.Array:
    """The "cudnn" backend: cuDNN flash attention, told to skip the upper triangle when every row is causal."""
    return jax.nn.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask=mask.allowed_Bx1xLxL,
                                        is_causal=mask.all_causal, implementation="cudnn")


def reference_kernel(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: Mask,
                     interpret: bool = False) -> jax.Array:
    """The "reference" backend: `reference_attention`."""
    return reference_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask.allowed_Bx1xLxL)


def splash_block_size(seq_len: int) -> int:
    """The block of queries and keys for rows of `seq_len`: a multiple of 128 dividing it."""
    if seq_len % 128:
        raise ValueError(f"splash attention needs rows whose length is a multiple of 128 (got {seq_len}); "
                         "set model.attention='xla' for this length")
    return max(b for b in range(128, min(SPLASH_MAX_BLOCK, seq_len) + 1, 128) if seq_len % b == 0)


@functools.lru_cache(maxsize=None)
def _splash_kernel_for(causal: bool, num_heads: int, seq_len: int,
                       interpret: bool) -> kernel_lib.SplashAttentionKernel:
    """The splash kernel over [H, L, K] inputs for one row (vmapped over the batch), cached by shape.

    It is `kernel_lib.make_splash_mha` with its mask tables left as the numpy arrays the library computes
    them as: constants in every world. The library moves them onto a device with `jnp.array`, which under a
    jit or shard_map trace makes that trace's tracers (leaked into every later call of the cached kernel),
    and under a TPU topology's compile-only devices (`python -m babylm_jax.aot`) has no device to run on."""
    shape = (seq_len, seq_len)
    heads = mask_lib.MultiHeadMask([mask_lib.CausalMask(shape) if causal else mask_lib.FullMask(shape)] * num_heads)
    block = splash_block_size(seq_len)
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


def _splash_attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B, rows: str, interpret: bool):
    _, seq_len, num_heads, head_dim = q_BxLxHxK.shape
    q_BxHxLxK = jnp.swapaxes(q_BxLxHxK * jnp.asarray(head_dim**-0.5, q_BxLxHxK.dtype), 1, 2)
    k_BxHxLxK, v_BxHxLxK = jnp.swapaxes(k_BxLxHxK, 1, 2), jnp.swapaxes(v_BxLxHxK, 1, 2)

    def run(causal: bool) -> jax.Array:
        kernel = _splash_kernel_for(causal, num_heads, seq_len, interpret)
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
    """Softmax(q k^T / sqrt(K), masked) v; the mask as `attention_mask(segment_ids, causal_B)`."""
    if rows not in SPLASH_ROWS:
        raise ValueError(f"splash attention rows={rows!r}: choose from {', '.join(SPLASH_ROWS)}")
    if causal_B is None:
        causal_B = jnp.full(segment_ids_BxL.shape[:1], rows == "causal")
    segment_ids_BxL = segment_ids_BxL.astype(jnp.int32)
    attend = functools.partial(_splash_attend, rows=rows, interpret=interpret)
    mesh = jax.sharding.get_abstract_mesh()
    axes = tuple(a for a in BATCH_AXES if not mesh.empty and a in mesh.axis_names)
    if not axes:
        return attend(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B)
    rows_spec = P(axes)
    args = (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, segment_ids_BxL, causal_B)
    if jax.sharding.AxisType.Explicit in mesh.axis_types:  # explicit sharding: say where each input goes
        args = tuple(jax.sharding.reshard(a, rows_spec) for a in args)
    return jax.shard_map(attend, mesh=mesh, in_specs=(rows_spec,) * 5, out_specs=rows_spec, check_vma=False)(*args)


def splash_kernel(q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask: Mask,
                  interpret: bool = False) -> jax.Array:
    """The "splash" backend: rows whose length is a multiple of 128 (shorter rows, e.g. an early
    curriculum stage, run XLA's attention); the mask must be built with `Mask.of`."""
    if q_BxLxHxK.shape[1] % 128:
        return xla_kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask)
    if mask.segment_ids_BxL is None:
        raise ValueError("splash attention needs the mask's segment ids: build it with Mask.of")
    return splash_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask.segment_ids_BxL, mask.rows, mask.causal_B,
                            interpret=interpret)


def _reference_forward(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_Bx1xLxL):
    """Output and softmax probabilities [B, H, L, L] (float32), as `jax.nn.dot_product_attention`
    (implementation "xla") computes them: scaled float32 scores, masked scores set to -0.7 x the
    largest float32, softmax in float32, probabilities cast to the value dtype."""
    scale = q_BxLxHxK.shape[-1] ** -0.5
    scores_BxHxLxL = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK, k_BxLxHxK, preferred_element_type=jnp.float32)
    scores_BxHxLxL = jnp.where(mask_Bx1xLxL, scores_BxHxLxL * jnp.float32(scale),
                               jnp.float32(-0.7 * float(jnp.finfo(jnp.float32).max)))
    probs_BxHxLxL = jax.nn.softmax(scores_BxHxLxL, axis=-1)
    out_BxLxHxK = jnp.einsum("bhlm,bmhk->blhk", probs_BxHxLxL.astype(v_BxLxHxK.dtype), v_BxLxHxK)
    return out_BxLxHxK, probs_BxHxLxL


@jax.custom_vjp
def reference_attention(
    q_BxLxHxK: jax.Array, k_BxLxHxK: jax.Array, v_BxLxHxK: jax.Array, mask_Bx1xLxL: jax.Array
) -> jax.Array:
    """Softmax attention, the numbers of `jax.nn.dot_product_attention(..., implementation="xla")`.

    Its gradient is written out (the flash-attention backward): dS = P * (dP - rowsum(dO * O)),
    the row sums taken over the head width from the output rather than over the keys from
    the [B, H, L, L] probabilities, which are kept from the forward pass; autodiff of the
    softmax makes more elementwise passes over [B, H, L, L] arrays, and at d_model 128 on a
    CPU those passes cost as much as attention's matmuls.
    """
    return _reference_forward(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_Bx1xLxL)[0]


def _reference_fwd(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_Bx1xLxL):
    out_BxLxHxK, probs_BxHxLxL = _reference_forward(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_Bx1xLxL)
    return out_BxLxHxK, (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, probs_BxHxLxL, out_BxLxHxK)


def _reference_bwd(residuals, grad_out_BxLxHxK):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, probs_BxHxLxL, out_BxLxHxK = residuals
    f32 = jnp.float32
    scale = q_BxLxHxK.shape[-1] ** -0.5
    grad_v = jnp.einsum("bhlm,blhk->bmhk", probs_BxHxLxL.astype(v_BxLxHxK.dtype), grad_out_BxLxHxK,
                        preferred_element_type=f32)
    grad_probs_BxHxLxL = jnp.einsum("blhk,bmhk->bhlm", grad_out_BxLxHxK, v_BxLxHxK, preferred_element_type=f32)
    # rowsum(P * dP) = rowsum(dO * O): a sum over K instead of over L
    row_BxLxH = jnp.sum(grad_out_BxLxHxK.astype(f32) * out_BxLxHxK.astype(f32), axis=-1)
    grad_scores_BxHxLxL = probs_BxHxLxL * (grad_probs_BxHxLxL - jnp.swapaxes(row_BxLxH, 1, 2)[..., None])
    grad_scores_BxHxLxL = (grad_scores_BxHxLxL * f32(scale)).astype(q_BxLxHxK.dtype)
    grad_q = jnp.einsum("bhlm,bmhk->blhk", grad_scores_BxHxLxL, k_BxLxHxK, preferred_element_type=f32)
    grad_k = jnp.einsum("bhlm,blhk->bmhk", grad_scores_BxHxLxL, q_BxLxHxK, preferred_element_type=f32)
    return (grad_q.astype(q_BxLxHxK.dtype), grad_k.astype(k_BxLxHxK.dtype), grad_v.astype(v_BxLxHxK.dtype), None)


reference_attention.defvjp(_reference_fwd, _reference_bwd)


KERNELS: dict[str, Kernel] = {  # a key of core.attention_backends.ATTENTION_BACKENDS -> its kernel
    "xla": xla_kernel,
    "cudnn": cudnn_kernel,
    "splash": splash_kernel,
    "reference": reference_kernel,
}
