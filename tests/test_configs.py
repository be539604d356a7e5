"""Every config in configs/ loads, validates and shape-initialises; recipe sizes match their names."""
import dataclasses
import pathlib

import jax
import ml_collections
import pytest

from babylm_jax.config.files import load_config_file
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import AUX_HEADS
from babylm_jax.model.aux_heads import AUX_COLLECTION
from babylm_jax.model.transformer import count_params
from babylm_jax.training.optimizer import make_schedule
from babylm_jax.training.state import abstract_state
from babylm_jax.training.step import seq_len_at

CONFIG_DIR = pathlib.Path(__file__).parents[1] / "configs"
CONFIG_FILES = sorted(p for p in CONFIG_DIR.glob("*.py") if p.stem != "eval")  # eval.py: test_eval_settings.py
# Recipes named by size: expected total parameters (embeddings included, tied).
NAMED_SIZES = {"causal_14m": 14e6, "mlm_14m": 14e6, "hybrid_100m": 100e6, "hybrid_100m_tpu_pod": 100e6}
CPU_MINUTES = {"base": "causal", "base_mlm": "mlm", "base_hybrid": "hybrid"}


@pytest.fixture(scope="module")
def states() -> dict:
    """name -> (config, abstract train state, model), shapes only (`jax.eval_shape`)."""
    out = {}
    for path in CONFIG_FILES:
        config = RunConfig.from_config(load_config_file(path))
        state, model = abstract_state(config)
        out[path.stem] = (config, state, model)
    return out


def test_recipes_present():
    assert set(CPU_MINUTES) | set(NAMED_SIZES) <= {p.stem for p in CONFIG_FILES}


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_config_loads_and_shape_initialises(path, states):
    config, state, model = states[path.stem]
    assert path.read_text().lstrip().startswith('"""'), "each config starts with a header docstring"
    n = count_params(state.params)
    assert n > 0 and state.step.shape == () and state.step.dtype == jax.numpy.int32
    assert all(x.dtype == jax.numpy.float32 for x in jax.tree.leaves(state.params)), "params are float32"
    # adamw and lamb keep two moment trees shaped like the params, plus a few scalar counters.
    param_shapes = sorted(x.shape for x in jax.tree.leaves(state.params))
    opt_leaves = jax.tree.leaves(state.opt_state)
    moments = [x for x in opt_leaves if x.shape != ()]
    scalars = [x for x in opt_leaves if x.shape == ()]
    assert sorted(x.shape for x in moments) == sorted(param_shapes * 2)
    assert sum(x.size for x in opt_leaves) == 2 * n + len(scalars) and 1 <= len(scalars) <= 4
    assert (state.ema_params is not None) == (config.train.ema_decay > 0)
    assert model.config.vocab_size == config.model.vocab_size
    # Keys the trainer reads exist and hold sensible values.
    make_schedule(config.train)
    assert config.train.batch_size % config.train.grad_accum_steps == 0
    for start_share, length in config.train.seq_len_curriculum:
        assert 0.0 <= start_share < 1.0 and config.train.seq_len % length == 0, (start_share, length)
    lengths = {seq_len_at(config.train, s) for s in range(0, config.train.num_steps, max(1, config.train.num_steps // 50))}
    assert max(lengths) <= model.config.max_len


@pytest.mark.parametrize("name,family", sorted(CPU_MINUTES.items()))
def test_cpu_minutes_defaults_share_base_scale(name, family, states):
    config, state, model = states[name]
    base_config, base_state, _ = states["base"]
    assert model.config.family == family
    assert config.data.corpus == "builtin" and model.config.dtype == "float32"
    for key in ("d_model", "num_layers", "num_heads", "d_ff"):
        assert getattr(config.model, key) == getattr(base_config.model, key), key
    for key in ("batch_size", "seq_len", "learning_rate"):
        assert getattr(config.train, key) == getattr(base_config.train, key), key
    # base.py's tokens are jieba words; the mlm and hybrid recipes keep the characters they were measured with
    expected = ("words", 8000, 4167) if name == "base" else ("char", 6000, 4800)
    assert (config.data.tokenizer.kind, config.model.vocab_size, config.train.num_steps) == expected


@pytest.mark.parametrize("name,expected", sorted(NAMED_SIZES.items()))
def test_named_recipe_sizes(name, expected, states):
    config, state, model = states[name]
    n = count_params(state.params)
    assert abs(n - expected) <= 0.2 * expected, f"{name}: {n:,} parameters"
    assert model.config.dtype == "bfloat16"
    # GPU recipes unroll their layers (their step anatomy: no stacked copies of saved activations); the pod scans
    assert model.config.scan_layers == (config.mesh.target == "tpu")
    assert config.data.corpus != "builtin", "real-run recipes train on the official corpus"


def test_recipe_specifics(states):
    causal, mlm = states["causal_14m"][2].config, states["mlm_14m"][2].config
    assert (causal.family, mlm.family) == ("causal", "mlm")
    assert (causal.num_layers, causal.num_heads) == (6, 4)
    # the fused kernels where the GPU step anatomy predicts a gain: both for causal_14m, the norm for hybrid_100m
    kernels = {name: (states[name][0].train.loss_kernel, states[name][0].model.norm_kernel)
               for name in ("causal_14m", "mlm_14m", "hybrid_100m", "hybrid_100m_tpu_pod")}
    assert kernels == {"causal_14m": ("pallas", "pallas"), "mlm_14m": ("xla", "xla"), "hybrid_100m": ("xla", "pallas"),
                       "hybrid_100m_tpu_pod": ("xla", "xla")}

    config, _, model = states["hybrid_100m"]
    c = model.config
    assert (c.family, c.num_layers, c.d_model, c.d_ff, c.vocab_size) == ("hybrid", 12, 768, 2560, 16384)
    assert c.remat == "none"  # the GPU step anatomy: recomputing costs more than keeping (58 GiB peak)
    t = config.train
    assert (t.rng_impl, t.loss_logits_dtype) == ("rbg", "bfloat16")
    assert (t.optimizer, t.learning_rate, t.weight_decay, t.ema_decay) == ("lamb", 1e-2, 0.1, 0.999)
    assert (t.mask_rate, t.mask_rate_final, t.hybrid_causal_share) == (0.3, 0.15, 1 / 16)
    assert t.seq_len == 512
    phases = [seq_len_at(t, s) for s in range(t.num_steps)]
    assert sorted(set(phases)) == [128, 256, 512] and phases[0] == 128 and phases[-1] == 512
    assert phases == sorted(phases)

    pod, _, pod_model = states["hybrid_100m_tpu_pod"]
    # the same model; only the layout the GPU step anatomy chose differs (the pod scans and remats)
    # and the XLA norms: the fused ones are Triton kernels, for GPUs
    assert pod_model.config == dataclasses.replace(c, scan_layers=True, remat="dots_no_batch", norm_kernel="xla")
    assert pod.distributed.initialize and pod.mesh.fsdp > 1
    assert pod.train.batch_size > t.batch_size


@pytest.mark.parametrize("name", sorted(NAMED_SIZES))
def test_sized_recipes_keep_the_subword_vocabulary_they_are_sized_on(name, states):
    """Their headers size the vocabulary as BPE pieces; base.py's tokenizer (jieba words) must not leak in."""
    config, _, _ = states[name]
    assert config.data.tokenizer.kind == "bpe" and config.model.vocab_size >= 16_384


@pytest.mark.parametrize("name", sorted(NAMED_SIZES))
def test_challenge_recipes_play_the_hanzi_track(name, states):
    """prepare writes their facts inside the budget; every corpus hanzi has a piece for the heads to label."""
    config, state, _ = states[name]
    assert 0 < config.data.hanzi_facts.share <= 0.05 and config.data.tokenizer.required_characters == "corpus_cjk"
    heads = config.train.aux_heads
    assert all(getattr(heads, head) > 0 for head in AUX_HEADS) and AUX_COLLECTION in state.params


@pytest.mark.parametrize("name", sorted(CPU_MINUTES))
def test_cpu_minutes_defaults_leave_the_facts_and_heads_off(name, states):
    config, state, _ = states[name]
    assert config.data.hanzi_facts.share == 0 and AUX_COLLECTION not in state.params


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_every_recipe_is_a_valid_run_config(path):
    run = RunConfig.from_config(load_config_file(path))
    assert run.train.seq_len <= run.model.max_len and run.data.word_budget > 0


@pytest.mark.parametrize("key, value, message", [
    ("train.schedule", "linear", r"config key train.schedule='linear': must be one of \('cosine', 'wsd'\)"),
    ("train.seq_len_curriculum", ((0.0, 16), (0.5, 4096)), r"train.seq_len_curriculum=4096 exceeds model.max_len=512"),
    ("checkpoint.every_steps", 0, r"config key checkpoint.every_steps=0: must be >= 1"),
    ("mesh.fsdp", 1.5, r"config key mesh.fsdp: 1.5 is not of type int"),
])
def test_a_bad_run_config_names_its_key(key, value, message):
    values = load_config_file(CONFIG_DIR / "base.py").to_dict()
    group, name = key.split(".")
    values[group][name] = value  # as a recipe file may set it (a ConfigDict keeps the first type)
    with pytest.raises(ValueError, match=message):
        RunConfig.from_config(ml_collections.ConfigDict(values))
