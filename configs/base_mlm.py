"""CPU-minutes default for the masked-LM (BERT-style encoder) family; base.py's scale.

    python -m babylm_jax.train --config configs/base_mlm.py --workdir runs/base_mlm

Same model, data and schedule as configs/base.py (when written: 4 layers, d 128, 1.6M
parameters, 300 steps of 16 x 128 tokens), trained bidirectionally on masked-token
prediction: the loss counts masked positions only; the masking rate falls from 0.3 to 0.15
over the run (more predicted tokens per step early on, as GPT-BERT does).

Measured (experiments/benchmarks/train_throughput.py on the shared 2-core CPU, f32,
2026-11-29): ~1,900 tokens/s (0.59 of the measured f32 matmul FLOP/s), so 300 steps take
about 5-6 minutes; XLA's memory analysis of the step: 19 MB of state, 258 MB of temporaries.
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
    config.model.family = "mlm"
    config.train.mask_rate = 0.3
    config.train.mask_rate_final = 0.15
    return config
