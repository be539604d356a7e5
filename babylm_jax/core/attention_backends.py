"""Attention backends (`model.attention`), one entry each: where a backend runs and in which dtypes.

    backend = ATTENTION_BACKENDS["cudnn"]   # platforms, dtypes, where "auto" picks it

`model.attention` is "auto" or a key of ATTENTION_BACKENDS (config.model checks it, once, before any
work); `model.attention.resolve` picks and refuses by the entries, and `model.attention.KERNELS` holds
each backend's kernel function beside the kernels: `kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask,
interpret)` -> out_BxLxHxK with `mask` a `model.attention.Mask` (`interpret`: a Pallas kernel runs in
interpret mode, on any backend; tests). "auto" takes, in table order, the first backend
whose `auto_on` holds the platform and whose dtypes hold the compute dtype, else AUTO_FALLBACK.
Adding a backend: its entry here and its kernel in `model.attention.KERNELS`.
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

    platforms: tuple[str, ...] = ANY_PLATFORM  # where it runs
    dtypes: tuple[str, ...] = ANY_DTYPE  # the compute dtypes it takes
    auto_on: tuple[str, ...] = ()  # platforms where "auto" picks it (for its dtypes)
    needs: str = ""  # what a refusal says it needs, e.g. "a CUDA GPU"


ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    "xla": AttentionBackend(),
    "cudnn": AttentionBackend(platforms=("cuda",), dtypes=HALF, auto_on=("cuda",), needs="a CUDA GPU"),
    "splash": AttentionBackend(platforms=("tpu",), auto_on=("tpu",), needs="a TPU (a Pallas TPU kernel)"),
    "reference": AttentionBackend(auto_on=("cpu",)),
}


def attention_kinds() -> tuple[str, ...]:
    """What `model.attention` may be: "auto", then the backends in table order."""
    return (AUTO, *ATTENTION_BACKENDS)
