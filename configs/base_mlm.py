"""CPU-minutes default for the masked-LM (BERT-style encoder) family; base.py's scale.

    python -m babylm_jax.train --config configs/base_mlm.py --workdir runs/base_mlm

Same model, data and schedule as configs/base.py (when written: 4 layers, d 128, 1.6M
parameters, characters as tokens, 4,800 steps of 16 x 128 tokens), trained bidirectionally on masked-token
prediction: the loss counts masked positions only; the masking rate falls from 0.3 to 0.15
over the run (more predicted tokens per step early on, as GPT-BERT does).

Only the predicted positions are projected to the vocabulary, so a step is faster than
base.py's (experiments/benchmarks/train_throughput.py, `mlm_over_causal_tokens` and
`hybrid_over_causal_tokens`: 1.12 and 1.07 on the shared CPU at load 2-3, 2026-12-01, after
issue 17's part 2 sped up base.py's step more; 1.17 and 1.43 before; figures and their
conditions in experiments/README.md). XLA's memory analysis of the step: 19 MB of state,
138 MB of temporaries (179 MB before issue 17's part 2).
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.model.family = "mlm"
    config.train.grad_accum_steps = 1  # one pass: base.py's two were measured for the causal step only
    config.train.mask_rate = 0.3
    config.train.mask_rate_final = 0.15
    return config
