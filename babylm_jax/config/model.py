"""The `model.*` settings, typed and checked: one `ModelConfig` for every model family.

    model = ModelConfig.from_config(config.model)   # names any unknown, mistyped or invalid key

The defaults below are the one home of the model's sizes and switches: configs/base.py starts
from them, and a key that a config (a run's config.json) leaves out takes them.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from babylm_jax.config.typed import Rule, at_least, build, one_of, optional
from babylm_jax.core.attention_backends import attention_kinds
from babylm_jax.core.families import FAMILY_SPECS, family_spec

REMATS = ("none", "full", "dots", "dots_no_batch")  # model.remat: model.transformer.REMAT_POLICIES
DTYPES = ("float32", "bfloat16")  # model.dtype: the compute dtype (params stay float32)
NORMS = ("rmsnorm", "layernorm")  # model.norm
MLPS = ("swiglu", "gelu")  # model.mlp
EMBEDDING_GRADS = ("scatter", "one_hot")  # model.embedding_grad: model.layers.embed_tokens
NORM_KERNELS = ("xla", "pallas")  # model.norm_kernel: model.layers.make_norm


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the Transformer; built from `config.model`, where a key left out takes its default."""

    family: str = optional("causal")  # a key of core.families.FAMILY_SPECS: "causal", "mlm" or "hybrid"
    vocab_size: int = optional(6000)  # the character recipe's (config.schema); configs/base.py's words take 8,000
    d_model: int = optional(128)
    num_layers: int = optional(4)
    num_heads: int = optional(4)
    d_ff: int = optional(384)
    max_len: int = optional(512)
    mlp: str = optional("swiglu")
    norm: str = optional("rmsnorm")
    rope_theta: float = optional(10000.0)
    dropout: float = optional(0.0)
    scan_layers: bool = optional(False)
    remat: str = optional("none")
    dtype: str = optional("float32")  # the compute dtype; "bfloat16" on accelerators
    # "auto" (resolved per platform by model.attention.resolve: cuDNN flash attention on a CUDA GPU in bf16,
    # Pallas splash attention on TPU, "reference" on CPU, "xla" elsewhere) or a key of
    # core.attention_backends.ATTENTION_BACKENDS: "xla" (jax.nn.dot_product_attention), "cudnn" (CUDA + bf16
    # only), "splash" (TPU only; rows of a multiple of 128 tokens, others take "xla") or "reference"
    # (written-out gradient)
    attention: str = optional("auto")
    residual_dtype: str = optional("float32")  # the residual stream between blocks; "bfloat16" only with dtype bfloat16
    # the token embedding's gradient: "scatter" (a scatter-add), or "one_hot" (matmuls of one-hot tokens: the fast
    # one under XLA's deterministic GPU ops, train.deterministic, which turn a scatter-add into a sort)
    embedding_grad: str = optional("scatter")
    # the norms: "xla", or "pallas" (model.fused_norm: the residual add, the norm and the cast in one pass, forward
    # and backward; Triton on GPU, interpret mode on CPU (resolved by training.state.build_model), not on TPU)
    norm_kernel: str = optional("xla")

    @classmethod
    def from_config(cls, model_config: Any) -> "ModelConfig":
        """Builds the model config from `config.model`, naming any unknown, mistyped or invalid key;
        a key left out takes the default above."""
        return build(cls, model_config, "model.")

    def rules(self) -> list[Rule]:
        """Sizes a model can have, then the rules between keys (checked by `build`, in order)."""
        heads_fit = self.num_heads < 1 or (not self.d_model % self.num_heads and not (self.d_model // self.num_heads) % 2)
        dtype_text = "config key {key}: {value!r} (use 'float32' or 'bfloat16')"
        return [*at_least(self, vocab_size=1, d_model=1, num_layers=0, num_heads=1, d_ff=1, max_len=1),
                ("dropout", 0.0 <= self.dropout < 1.0, "must be in [0, 1)"),
                ("rope_theta", self.rope_theta > 0, "must be > 0"),
                one_of(self, "family", tuple(FAMILY_SPECS)),
                ("d_model", heads_fit, f"config keys {{key}}={{value}}, {{prefix}}num_heads={self.num_heads}: "
                 "head width d_model/num_heads must be an even integer"),
                one_of(self, "norm", NORMS), one_of(self, "mlp", MLPS),
                one_of(self, "embedding_grad", EMBEDDING_GRADS), one_of(self, "remat", REMATS),
                one_of(self, "norm_kernel", NORM_KERNELS),
                ("dtype", self.dtype in DTYPES, dtype_text),
                ("residual_dtype", self.residual_dtype in DTYPES, dtype_text),
                ("residual_dtype", self.residual_dtype != "bfloat16" or self.dtype == "bfloat16",
                 "config key {key}='bfloat16' needs {prefix}dtype='bfloat16'"),
                one_of(self, "attention", attention_kinds(), ", ".join(attention_kinds()))]

    @property
    def compute_dtype(self) -> Any:
        import jax.numpy as jnp  # here, so that checking a config imports no jax

        return jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32

    @property
    def stream_dtype(self) -> Any:
        """The residual stream's dtype (model.residual_dtype)."""
        import jax.numpy as jnp

        return jnp.bfloat16 if self.residual_dtype == "bfloat16" else jnp.float32

    @property
    def has_head_transform(self) -> bool:
        """Encoder families carry BERT's head transform before the output projection."""
        return not family_spec(self.family).causal
