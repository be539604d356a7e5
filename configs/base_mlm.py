"""CPU-minutes default for the masked-LM (BERT-style encoder) family; base.py's scale.

    python -m babylm_jax.train --config configs/base_mlm.py --workdir runs/base_mlm

base.py's model, data and schedule on characters as tokens (the fields' defaults; the words
study that gave base.py jieba words trained the causal family only), in one pass of 16 rows a
step, trained bidirectionally on masked-token prediction: the loss counts masked positions only,
and the masking rate falls from 0.3 to 0.15 over the run (more predicted tokens per step early
on, as GPT-BERT does). Only the predicted positions are projected
to the vocabulary, so a step is faster than base.py's (experiments/README.md, "Training
throughput and MFU").
"""
import ml_collections

from babylm_jax.config.schema import default_config


def get_config() -> ml_collections.ConfigDict:
    config = default_config()  # characters, as measured: the words study trained the causal family only
    config.model.family = "mlm"
    config.train.mask_rate = 0.3  # falling to train.mask_rate_final over the run
    return config
