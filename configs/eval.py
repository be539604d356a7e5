"""Evaluation settings, read by `python -m babylm_jax.evaluate` (without --config it reads the same defaults).

    python -m babylm_jax.evaluate --workdir runs/base --data_dir ../shared/data --tasks all
    python -m babylm_jax.evaluate ... --config.scoring.within_word_l2r=True --config.fmri.layer=2
    python -m babylm_jax.evaluate ... --limit 64 --config.finetune.epochs=1 \\
        --config.finetune.tasks.cluewsc2020.epochs=1                   # a quick run

Every key is at its field's default (babylm_jax/config/evaluation.py and, for `finetune.*`, the
official protocol in babylm_jax/config/finetune_protocols.py say what each key does); copy this
file and change values for settings of your own. Unknown keys are refused, and every key is
checked before any model is loaded.
"""
import ml_collections

from babylm_jax.config.evaluation import default_config


def get_config() -> ml_collections.ConfigDict:
    return default_config()
