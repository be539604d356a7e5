"""Hugging Face export: weight mapping, config.json, fast tokenizer, modelling code, model card.

Needs only numpy + safetensors (+ `tokenizers` for tokenizer.json): `pip install -e ".[export]"`.
The files `configuration_babylm.py` and `modeling_babylm.py` are shipped into the export
directory (they import torch/transformers) and are never imported by babylm_jax itself.
"""
