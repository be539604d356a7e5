"""CPU-minutes default for the GPT-BERT hybrid family (MNTP + causal LM); base.py's scale.

    python -m babylm_jax.train --config configs/base_hybrid.py --workdir runs/base_hybrid

Same model, data and schedule as configs/base.py (when written: 4 layers, d 128, 1.6M
parameters, characters as tokens, 4,800 steps of 16 x 128 tokens). One Transformer: 1 row in 16 is trained as a
causal LM, the others with masked next-token prediction (the masked token at i is
predicted at position i-1); masking rate 0.3 -> 0.15. The result can be scored causally
and with MNTP pseudo-log-likelihood.

Only the predicted positions are projected to the vocabulary, so a step is faster than
base.py's (experiments/benchmarks/train_throughput.py, `mlm_over_causal_tokens` and
`hybrid_over_causal_tokens`: 1.12 and 1.07 on the shared CPU at load 2-3, 2026-12-01, after
issue 17's part 2 sped up base.py's step more; 1.17 and 1.43 before; figures and their
conditions in experiments/README.md). XLA's memory analysis of the step: 19 MB of state,
139 MB of temporaries (179 MB before issue 17's part 2).
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.model.family = "hybrid"
    config.train.grad_accum_steps = 1  # one pass: 8-row passes would round its 1-in-16 causal rows to none
    config.train.mask_rate = 0.3
    config.train.mask_rate_final = 0.15
    config.train.hybrid_causal_share = 1 / 16
    return config
