"""Our Flax params -> Hugging Face tensor names and layouts (float32 numpy), and safetensors.

Names follow transformers' Llama (`model.layers.{i}.self_attn.q_proj.weight`, ...), so a
causal SwiGLU/RMSNorm model loads as `LlamaForCausalLM`; the shipped `modeling_babylm.py`
uses the same names plus norm biases (LayerNorm), `mlp.up_proj` alone (GELU MLP) and
`head.*` (the mlm/hybrid head transform). Flax kernels are [in, out]; torch Linear weights
are [out, in]. The output projection is tied to `model.embed_tokens.weight`.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from babylm_jax.config.model import ModelConfig
from babylm_jax.core.atomic import default_file_mode


def _norm(prefix: str, flax_norm: Mapping[str, Any]) -> dict[str, np.ndarray]:
    tensors = {f"{prefix}.weight": flax_norm["scale"]}
    if "bias" in flax_norm:
        tensors[f"{prefix}.bias"] = flax_norm["bias"]
    return tensors


def _layer(prefix: str, block: Mapping[str, Any], config: ModelConfig) -> dict[str, np.ndarray]:
    d = config.d_model
    qkv_Dx3xHxK = np.asarray(block["attn"]["qkv"]["kernel"])
    out_HxKxD = np.asarray(block["attn"]["out"]["kernel"])
    tensors = {
        **_norm(f"{prefix}.input_layernorm", block["attn_norm"]),
        f"{prefix}.self_attn.q_proj.weight": qkv_Dx3xHxK[:, 0].reshape(d, d).T,
        f"{prefix}.self_attn.k_proj.weight": qkv_Dx3xHxK[:, 1].reshape(d, d).T,
        f"{prefix}.self_attn.v_proj.weight": qkv_Dx3xHxK[:, 2].reshape(d, d).T,
        f"{prefix}.self_attn.o_proj.weight": out_HxKxD.reshape(d, d).T,
        **_norm(f"{prefix}.post_attention_layernorm", block["mlp_norm"]),
        f"{prefix}.mlp.down_proj.weight": np.asarray(block["mlp"]["down"]["kernel"]).T,
    }
    if config.mlp == "swiglu":
        gate_up_Dx2xF = np.asarray(block["mlp"]["gate_up"]["kernel"])
        tensors[f"{prefix}.mlp.gate_proj.weight"] = gate_up_Dx2xF[:, 0].T
        tensors[f"{prefix}.mlp.up_proj.weight"] = gate_up_Dx2xF[:, 1].T
    else:
        tensors[f"{prefix}.mlp.up_proj.weight"] = np.asarray(block["mlp"]["up"]["kernel"]).T
    return tensors


def _index_tree(tree: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Layer i of an `nn.scan` params subtree."""
    return {k: _index_tree(v, i) if isinstance(v, Mapping) else np.asarray(v)[i] for k, v in tree.items()}


def hf_state_dict(params: Mapping[str, Any], config: ModelConfig) -> dict[str, np.ndarray]:
    """Float32, C-contiguous HF tensors from unboxed params (looped or `nn.scan` layout)."""
    inner = params["params"] if "params" in params else params
    tensors: dict[str, Any] = {"model.embed_tokens.weight": inner["embed"]["embedding"]}
    for i in range(config.num_layers):
        if "layers" in inner:  # nn.scan: every leaf has a leading layer axis
            block = _index_tree(inner["layers"], i)
        else:
            block = inner[f"layers_{i}"]
        tensors.update(_layer(f"model.layers.{i}", block, config))
    tensors.update(_norm("model.norm", inner["final_norm"]))
    if config.has_head_transform:
        tensors["head.dense.weight"] = np.asarray(inner["head_dense"]["kernel"]).T
        tensors["head.dense.bias"] = inner["head_dense"]["bias"]
        tensors.update(_norm("head.norm", inner["head_norm"]))
    return {name: np.ascontiguousarray(np.asarray(value, dtype=np.float32)) for name, value in tensors.items()}


def save_safetensors(tensors: Mapping[str, np.ndarray], path: str | os.PathLike) -> None:
    """Writes `model.safetensors` with the `format: pt` metadata transformers expects."""
    try:
        from safetensors.numpy import save_file
    except ImportError as error:
        raise ImportError("Writing model.safetensors needs the `safetensors` package: pip install -e '.[export]'") from error

    save_file(dict(tensors), str(path), metadata={"format": "pt"})
    os.chmod(path, default_file_mode())  # safetensors creates its file 0600, whatever the umask
