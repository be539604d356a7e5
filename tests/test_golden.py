"""Golden values in the manner of nanodo: one step of a fixed tiny model per family, stored.

Equality tests between two code paths miss a change both paths share (an initializer, a
loss term, the decay mask, the framing of a batch); these numbers catch it. After an
intended numerical change, rewrite them with `BABYLM_UPDATE_GOLDEN=1 pytest tests/test_golden.py`
and say why in the commit.
"""
import json
import os
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.model import objectives
from babylm_jax.training.optimizer import make_train_optimizer
from babylm_jax.training.state import boxed_init_fn, build_model
from babylm_jax.training.step import make_train_step

GOLDEN = pathlib.Path(__file__).parent / "fixtures" / "golden_step.json"
MASKING = objectives.MaskingConfig(mask_id=4, vocab_size=64, special_ids=(0, 1, 2, 3, 4, 5, 6))


def _batch() -> dict:
    """8 rows of 32 tokens, two documents a row (segment ids 1 and 2, positions restarting)."""
    tokens = np.random.default_rng(0).integers(7, 64, size=(8, 32)).astype(np.int32)
    segments = np.where(np.arange(32) < 20, 1, 2).astype(np.int32)
    positions = np.where(np.arange(32) < 20, np.arange(32), np.arange(32) - 20).astype(np.int32)
    return {"tokens": jnp.asarray(tokens), "segment_ids": jnp.broadcast_to(segments, (8, 32)),
            "positions": jnp.broadcast_to(positions, (8, 32))}


def _rms_by_path(tree) -> dict[str, float]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): float(jnp.sqrt(jnp.mean(jnp.square(x)))) for path, x in leaves}


def step_stats(family: str) -> dict:
    config = tiny_config(pathlib.Path("unused"), family=family)
    config.model.norm = "layernorm"
    config.train.update(warmup_steps=0, weight_decay=0.1, learning_rate=1e-2)
    config = RunConfig.from_config(config)
    model, optimizer = build_model(config.model), make_train_optimizer(config.train)
    state = jax.jit(lambda rng: nn.meta.unbox(boxed_init_fn(config, model, optimizer)(rng)))(jax.random.key(0))
    batch = _batch()
    settings = objectives.LossSettings(masking=MASKING, hybrid_causal_share=0.25)  # 2 causal rows of 8
    loss_fn = lambda p: objectives.compute_loss(model, p, batch, jax.random.key(1), settings=settings)[0]  # noqa: E731
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    new_state, _ = jax.jit(make_train_step(config, model, optimizer, MASKING, 32))(state, batch, jax.random.key(2))
    return {"loss": float(loss), "grad_rms": _rms_by_path(grads), "param_rms_after_step": _rms_by_path(new_state.params)}


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
@pytest.mark.slow
def test_one_step_matches_the_stored_golden_values(family):
    stats = step_stats(family)
    stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("BABYLM_UPDATE_GOLDEN"):
        stored[family] = stats
        GOLDEN.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    golden = stored[family]
    assert stats["loss"] == pytest.approx(golden["loss"], rel=1e-4)
    for kind in ("grad_rms", "param_rms_after_step"):
        assert stats[kind].keys() == golden[kind].keys()
        for path, value in golden[kind].items():
            assert stats[kind][path] == pytest.approx(value, rel=1e-4, abs=1e-9), (kind, path)
