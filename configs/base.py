"""CPU-minutes default: a small causal (GPT-style) LM on the built-in Chinese corpus.

    python -m babylm_jax.train --config configs/base.py --workdir runs/base
    python -m babylm_jax.train --config configs/base.py --config.train.num_steps=20 ...

Every key at its field's default (babylm_jax/config/data.py, model.py and training.py say what
each key does), which is the recipe study's best row within 100 TFLOP (experiments/README.md,
"Recipes that learn", with its scores and times): characters as tokens, 4 layers of d 128 (1.6M
parameters), 4,800 steps of 16 x 128 tokens, about 2.2 passes over the built-in corpus.
Every key is read somewhere; unknown keys given on the command line are refused.
"""
import ml_collections

from babylm_jax.config.schema import default_config


def get_config() -> ml_collections.ConfigDict:
    config = default_config()
    # Two passes of 8 rows a step: on a CPU the activations of 1,024 tokens stay in cache (about
    # 1.08x the tokens/s of one pass of 16 rows); the gradient is the 16-row batch's either way.
    config.train.grad_accum_steps = 2
    return config
