"""Evaluation settings as a recipe: the package's defaults (babylm_jax/config/eval_defaults.py, which
`python -m babylm_jax.evaluate` reads when no --config is given). Copy this file and change values
for settings of your own, or override keys on the command line (`--config.finetune.epochs=3`)."""
from babylm_jax.config.eval_defaults import get_config  # noqa: F401
