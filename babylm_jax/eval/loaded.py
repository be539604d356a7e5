"""A trained model as evaluation and export use it: the run's config, model, params, tokenizer.

`training.checkpoints.load_for_eval` builds one from a workdir; the evaluation runners and
the Hugging Face export read it. It lives in eval/, not model/, because it holds the run's config:
the model code reads no RunConfig. Imports only the config, model and data floors.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.model.transformer import Transformer

Params = Mapping[str, Any]  # the flax variables {"params": {...}}, host arrays


@dataclasses.dataclass(frozen=True, eq=False)  # eq=False: hashed by identity (caches keyed by model)
class LoadedModel:
    """A trained model ready for evaluation or export, and where it came from."""

    config: RunConfig  # the run's config (config.json), typed
    model: Transformer
    params: Params
    tokenizer: Tokenizer
    step: int
    tokens_seen: int
    words_seen: float
    used_ema: bool  # params are the EMA params
