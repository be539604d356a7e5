"""A recipe's model as a causal LM's shape, for a model of another framework built to match it.

    python experiments/benchmarks/recipe_shape.py configs/causal_14m.py [--config.a.b=v ...] > shape.json

Prints one JSON object: the name, d_model, num_layers, num_heads, d_ff, vocab_size, max_len, mlp
("gelu" or "swiglu"), norm, the step's batch (train.batch_size x train.seq_len), the parameter
count of our causal model of that shape, and its training FLOPs per token by
`training.metrics` (every position predicted, causal attention: an mlm or hybrid recipe
is counted as the causal LM of its size). torch_reference_throughput.py reads it.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from babylm_jax.config import cli  # noqa: E402
from babylm_jax.config.model import ModelConfig  # noqa: E402
from babylm_jax.config.schema import RunConfig  # noqa: E402
from babylm_jax.model.transformer import Transformer, count_params  # noqa: E402
from babylm_jax.training import metrics  # noqa: E402


def causal_shape(path: str, overrides: list[str]) -> dict:
    config = RunConfig.from_config(cli.load_config(path, overrides))
    model = dataclasses.replace(config.model, family="causal", dropout=0.0)
    abstract = jax.eval_shape(Transformer(ModelConfig.from_config(dataclasses.asdict(model))).init,
                              jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    return {
        "name": pathlib.Path(path).stem, "d_model": model.d_model, "num_layers": model.num_layers,
        "num_heads": model.num_heads, "d_ff": model.d_ff, "vocab_size": model.vocab_size, "max_len": model.max_len,
        "mlp": model.mlp, "norm": model.norm, "batch_size": config.train.batch_size, "seq_len": config.train.seq_len,
        "params": count_params(abstract),
        "flops_per_token": metrics.train_flops_per_token(model, config.train.seq_len, causal_share=1.0, predicted_share=1.0),
    }


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    print(json.dumps(causal_shape(sys.argv[1], sys.argv[2:])))
