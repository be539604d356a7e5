"""CPU-minutes default for the GPT-BERT hybrid family (MNTP + causal LM); base.py's scale.

    python -m babylm_jax.train --config configs/base_hybrid.py --workdir runs/base_hybrid

Same model size, data and schedule as configs/base.py (4 layers, d 192, 5.2M parameters).
One Transformer: 1 row in 16 is trained as a causal LM, the others as masked next-token
prediction (the masked token at i is predicted at position i-1), masking rate 0.3 -> 0.15.
The result can be scored both causally and with MNTP pseudo-log-likelihood.

Measured (experiments/benchmarks/train_throughput.py, 2-core shared CPU, f32, 2026-07):
about 5,000 tokens/s (MFU vs the measured f32 matmul peak ~0.5), so 600 steps x 2,048
tokens take about 4-5 minutes; memory as configs/base_mlm.py.
"""
import importlib.util
import pathlib

import ml_collections


def _load(name: str) -> ml_collections.ConfigDict:
    """`get_config()` of a sibling config file (configs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"configs_{name}", pathlib.Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def get_config() -> ml_collections.ConfigDict:
    config = _load("base")
    config.model.family = "hybrid"
    config.train.mask_rate = 0.3
    config.train.mask_rate_final = 0.15
    config.train.hybrid_causal_share = 1 / 16
    return config
