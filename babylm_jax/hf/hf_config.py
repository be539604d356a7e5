"""config.json for an export: transformers' Llama when ours matches it, else our own `babylm` type.

A causal model with SwiGLU MLP and RMSNorm whose AutoModel returns the final layer is a
Llama (rotate-half RoPE, no biases, tied embeddings, eps 1e-6) and needs no remote code.
Every other variant uses the shipped `configuration_babylm.py` and the family's modelling
file (`core.families`: `modeling_babylm.py` for every built-in family), registered through
`auto_map` for the family's Auto classes.
"""
from __future__ import annotations

from typing import Any

from babylm_jax.core.families import CAUSAL_LM, family_spec
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID
from babylm_jax.model import layers
from babylm_jax.config.model import ModelConfig

SPECIAL_IDS = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID, "mask": MASK_ID, "cls": CLS_ID, "sep": SEP_ID}
NORM_EPS = layers.RMSNorm.eps  # the model's norms (RMSNorm and LayerNorm share it)
CONFIGURATION_FILE = "configuration_babylm.py"


def resolve_output_layer(config: ModelConfig, layer: int | None) -> int:
    """The hidden-state index AutoModel returns (0 = embeddings .. N = final normed output)."""
    n = config.num_layers
    if layer is None:
        return n
    if not -(n + 1) <= layer <= n:
        raise ValueError(f"--layer {layer}: the model has hidden states 0..{n} (or -{n + 1}..-1)")
    return layer % (n + 1)


def is_llama(config: ModelConfig, output_layer: int) -> bool:
    """Whether the export maps onto transformers' LlamaForCausalLM without remote code."""
    return (
        family_spec(config.family).llama_export and config.mlp == "swiglu" and config.norm == "rmsnorm"
        and output_layer == config.num_layers
    )


def remote_code_files(family: str) -> tuple[str, str]:
    """The code files an export of `family` ships beside config.json (from babylm_jax/hf/)."""
    return CONFIGURATION_FILE, family_spec(family).hf_modeling_file


def _auto_map(family: str) -> dict[str, str]:
    configuration, modeling = (name.removesuffix(".py") for name in remote_code_files(family))
    auto_map = {"AutoConfig": f"{configuration}.BabyLMConfig", "AutoModel": f"{modeling}.BabyLMModel"}
    auto_map.update((auto, f"{modeling}.{cls}") for auto, cls in family_spec(family).hf_models)
    return auto_map


def hf_config(config: ModelConfig, output_layer: int, provenance: dict[str, Any]) -> dict[str, Any]:
    """The config.json dict; `provenance` (step, words seen, ...) is recorded under "babylm_jax"."""
    spec = family_spec(config.family)
    common = {
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "max_position_embeddings": config.max_len,
        "rope_theta": config.rope_theta,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "pad_token_id": SPECIAL_IDS["pad"],
        "bos_token_id": SPECIAL_IDS["bos"],
        "eos_token_id": SPECIAL_IDS["eos"],
        "torch_dtype": "float32",
        "babylm_jax": {"family": config.family, "output_layer": output_layer, **provenance},
    }
    if is_llama(config, output_layer):
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            **common,
            "num_key_value_heads": config.num_heads,
            "head_dim": config.d_model // config.num_heads,
            "hidden_act": "silu",
            "rms_norm_eps": NORM_EPS,
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "pretraining_tp": 1,
            "use_cache": True,
        }
    return {
        "architectures": [spec.hf_models[0][1]],
        "model_type": "babylm",
        "auto_map": _auto_map(config.family),
        **common,
        "family": config.family,
        "mlp": config.mlp,
        "norm": config.norm,
        "norm_eps": NORM_EPS,
        "output_layer": output_layer,
    }


def generation_config(family: str) -> dict[str, Any] | None:
    """generation_config.json of an export that generates (its Auto classes hold a causal LM): `generate()`
    stops at the family's closer (</s>, or [SEP] for a hybrid) as babylm_jax's `sample` does; None otherwise."""
    spec = family_spec(family)
    if CAUSAL_LM not in spec.hf_models:
        return None
    return {"bos_token_id": spec.framing.opener_id, "eos_token_id": spec.framing.closer_id, "pad_token_id": PAD_ID}
