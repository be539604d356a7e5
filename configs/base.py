"""CPU-minutes default: a small causal (GPT-style) LM on the built-in Chinese corpus, jieba words as tokens.

    python -m babylm_jax.train --config configs/base.py --workdir runs/base
    python -m babylm_jax.train --config configs/base.py --config.train.num_steps=20 ...

The recipe study's best row within 100 TFLOP (experiments/README.md, "Recipes that learn"): 4
layers of d 128, 16 x 128 tokens a step, about 2 passes over the built-in corpus. Its tokens are
jieba words (data.tokenizer.kind="words": the 8,000 frequent words and characters whole, every
other word in smaller pieces, no hanzi unknown): at the same 99.4 TFLOP (4,167 steps, 1.9M
parameters) they beat characters (6,000 ids, 4,800 steps) on the full ZhoBLiMP by more than the
seed spread, 0.670 against 0.643, and tie BPE (0.666; experiments/README.md, "Words as tokens").
It plays the ten tasks outside the hanzi track: at this compute the character facts and heads the
GPU recipes take cost ZhoBLiMP 2.3 points on the one seed measured (more than the 0.6-point seed
spread) while they lift the open hanzi probe from 0.49 / 0.53 to 0.73 / 0.76 (experiments/README.md,
"The hanzi track in the recipes"). To play all fourteen: --config.data.hanzi_facts.share=0.008
--config.data.hanzi_facts.characters=1000 and --config.train.aux_heads.syllable=0.3 with tone,
initial, final and radical at 0.1 (or configs/base_hanzi.py, on characters).
Every other key is at its field's default (babylm_jax/config/data.py, model.py and training.py say
what each key does); unknown keys given on the command line are refused.
"""
import ml_collections

from babylm_jax.config.schema import default_config


def get_config() -> ml_collections.ConfigDict:
    config = default_config()
    config.data.tokenizer.kind = "words"
    config.model.vocab_size = 8000
    config.train.num_steps = 4167  # the 99.4 TFLOP of 4,800 steps over 6,000 character ids
    # Two passes of 8 rows a step: on a CPU the activations of 1,024 tokens stay in cache (about
    # 1.08x the tokens/s of one pass of 16 rows); the gradient is the 16-row batch's either way.
    config.train.grad_accum_steps = 2
    return config
