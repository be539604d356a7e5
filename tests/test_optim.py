"""Learning-rate schedules and optimizers built from `config.train`."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from babylm_jax.training import optim


def train_config(**overrides) -> ml_collections.ConfigDict:
    values = dict(learning_rate=1.0, num_steps=100, warmup_steps=10, min_lr_ratio=0.1, schedule="cosine",
                  decay_share=0.2, optimizer="adamw", b1=0.9, b2=0.95, weight_decay=0.1, grad_clip=1.0)
    values.update(overrides)
    return ml_collections.ConfigDict(values)


def test_cosine_warms_up_then_decays_to_the_floor():
    schedule = optim.make_schedule(train_config())
    assert float(schedule(0)) == 0.0 and float(schedule(5)) == pytest.approx(0.5)
    assert float(schedule(10)) == pytest.approx(1.0)
    assert float(schedule(55)) == pytest.approx(0.55, abs=1e-6)  # halfway down the cosine: (1 + 0.1) / 2
    assert float(schedule(100)) == pytest.approx(0.1)


def test_warmup_stable_decay():
    schedule = optim.make_schedule(train_config(schedule="wsd"))
    assert float(schedule(5)) == pytest.approx(0.5)
    assert [float(schedule(s)) for s in (10, 40, 80)] == pytest.approx([1.0, 1.0, 1.0])  # stable until 80
    assert float(schedule(90)) == pytest.approx(0.55)  # linear decay over the last 20 steps
    assert float(schedule(100)) == pytest.approx(0.1)


def test_short_runs_shorten_the_warmup_and_bad_names_are_refused():
    assert optim.effective_warmup(train_config(num_steps=20, warmup_steps=30)) == 2
    with pytest.raises(ValueError, match="train.schedule"):
        optim.make_schedule(train_config(schedule="linear"))
    with pytest.raises(ValueError, match="train.optimizer"):
        optim.make_optimizer(train_config(optimizer="sgd"))


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_optimizers_skip_weight_decay_on_vectors(name):
    params = {"kernel": jnp.ones((4, 4)), "scale": jnp.ones((4,))}
    optimizer = optim.make_optimizer(train_config(optimizer=name, warmup_steps=0, weight_decay=0.5))
    state = optimizer.init(params)
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = optimizer.update(zero_grads, state, params)
    assert float(jnp.abs(updates["kernel"]).max()) > 0  # decay pulls matrices towards zero
    np.testing.assert_array_equal(updates["scale"], 0.0)  # ... but not norm scales or biases
