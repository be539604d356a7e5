"""CPU-minutes default for the GPT-BERT hybrid family (MNTP + causal LM); base.py's scale.

    python -m babylm_jax.train --config configs/base_hybrid.py --workdir runs/base_hybrid

base.py's model, data and schedule on characters as tokens (the fields' defaults; the words
study that gave base.py jieba words trained the causal family only), in one pass of 16 rows a step
(8-row passes would round its 1-in-16 causal rows to none), as one Transformer: 1 row in 16 is trained as a causal LM,
the others with masked next-token prediction (the masked token at i is predicted at position
i-1); masking rate 0.3 -> 0.15. The result can be scored causally and with MNTP
pseudo-log-likelihood. Only the predicted positions are projected to the vocabulary, so a step
is faster than base.py's (experiments/README.md, "Training throughput and MFU").
"""
import ml_collections

from babylm_jax.config.schema import default_config


def get_config() -> ml_collections.ConfigDict:
    config = default_config()  # characters, as measured: the words study trained the causal family only
    config.model.family = "hybrid"
    config.train.mask_rate = 0.3  # falling to train.mask_rate_final over the run
    return config
