"""Attention backends (`model.attention`), one entry each: where a kernel runs, in which dtypes, and the kernel.

    backend = ATTENTION_BACKENDS["cudnn"]   # platforms, dtypes, kernel ("module:function")

`model.attention` is "auto" or a key of ATTENTION_BACKENDS (config.model checks it, once);
`model.attention.resolve` picks and refuses by the entries, `model.attention.attend` runs the
entry's kernel, imported on first use: `kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, interpret)`
-> out_BxLxHxK with `mask` a `model.attention.Mask` (`interpret`: a Pallas kernel runs in
interpret mode, on any backend; tests). "auto" takes, in table order, the first backend
whose `auto_on` holds the platform and whose dtypes hold the compute dtype, else AUTO_FALLBACK.
Adding a backend: its entry here and its kernel module (in model/).
"""
from __future__ import annotations

import dataclasses

AUTO = "auto"
AUTO_FALLBACK = "xla"
ANY_PLATFORM = ("cpu", "cuda", "rocm", "tpu")  # lowering platforms (model.attention.platform_of)
ANY_DTYPE = ("float32", "bfloat16", "float16")
HALF = ("bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class AttentionBackend:
    """One implementation of softmax attention and what it needs."""

    kernel: str  # "module:function", imported on first use
    platforms: tuple[str, ...] = ANY_PLATFORM  # where it runs
    dtypes: tuple[str, ...] = ANY_DTYPE  # the compute dtypes it takes
    auto_on: tuple[str, ...] = ()  # platforms where "auto" picks it (for its dtypes)
    needs: str = ""  # what a refusal says it needs, e.g. "a CUDA GPU"


ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    "xla": AttentionBackend("babylm_jax.model.attention:xla_kernel"),
    "cudnn": AttentionBackend("babylm_jax.model.attention:cudnn_kernel", platforms=("cuda",), dtypes=HALF,
                              auto_on=("cuda",), needs="a CUDA GPU"),
    "splash": AttentionBackend("babylm_jax.model.splash_attention:splash_kernel", platforms=("tpu",),
                               auto_on=("tpu",), needs="a TPU (a Pallas TPU kernel)"),
    "reference": AttentionBackend("babylm_jax.model.attention:reference_kernel", auto_on=("cpu",)),
}


def attention_kinds() -> tuple[str, ...]:
    """What `model.attention` may be: "auto", then the backends in table order."""
    return (AUTO, *ATTENTION_BACKENDS)
