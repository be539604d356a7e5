"""CPU-minutes default for the masked-LM (BERT-style encoder) family; base.py's scale.

    python -m babylm_jax.train --config configs/base_mlm.py --workdir runs/base_mlm

Same model size, data and schedule as configs/base.py (4 layers, d 192, 5.2M parameters),
trained bidirectionally on masked-token prediction. Masking rate falls from 0.3 to 0.15 over
the run (a higher rate early gives more predicted tokens per step, as in GPT-BERT).

Measured (experiments/benchmarks/train_throughput.py, 2-core shared CPU, f32, 2026-07):
about 5,000 tokens/s (MFU vs the measured f32 matmul peak ~0.5), so 600 steps x 2,048
tokens take about 4-5 minutes; the compiled step needs ~40 MB of temporaries plus ~85 MB
of train state (params, AdamW moments), as XLA's memory analysis reports.
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
