"""Analytic FLOPs per token (training/metrics.py) against a hand count and the model's own matmuls.

Convention: a multiply-add is 2 FLOPs; training = 3 x forward (forward, backward for
activations, backward for weights); forward per token = the weight matmuls + the tied output
projection (the embedding lookup is free) + attention (QK^T and PV over the full row),
halved for causal rows. Norms, softmax and other elementwise work are not counted.
"""
import pathlib
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.model import objectives
from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.model.transformer import Transformer
from babylm_jax.training import metrics, peaks

# A small config: d 32, 2 layers, 2 heads, FFN 64, vocabulary 100, rows of 16 tokens.
D, N, F, V, L = 32, 2, 64, 100, 16

# Hand count, forward FLOPs per token.
QKV = 2 * D * 3 * D  # 6,144: x [D] times the fused q/k/v kernel [D, 3D]
ATTN_OUT = 2 * D * D  # 2,048
SWIGLU = 2 * D * 2 * F + 2 * F * D  # 8,192 gate+up [D, 2F] + 4,096 down [F, D]
GELU_MLP = 2 * D * F + 2 * F * D  # 4,096 up + 4,096 down
SCORES = 2 * L * D  # QK^T: one query against 16 keys, 32 channels over all heads
MIX = 2 * L * D  # PV: 16 values weighted, 32 channels
HEAD_TRANSFORM = 2 * D * D  # mlm/hybrid: dense D -> D before the output projection
OUTPUT = 2 * D * V  # 6,400: tied output projection

HAND_FORWARD = {
    "causal": N * (QKV + ATTN_OUT + SWIGLU + (SCORES + MIX) / 2) + OUTPUT,  # 49,408
    "mlm": N * (QKV + ATTN_OUT + SWIGLU + SCORES + MIX) + HEAD_TRANSFORM + OUTPUT,  # 53,504
    # hybrid with 1 causal row in 4: attention 1/4 x half + 3/4 x full
    "hybrid": N * (QKV + ATTN_OUT + SWIGLU + (SCORES + MIX) * (0.25 * 0.5 + 0.75)) + HEAD_TRANSFORM + OUTPUT,
}
CAUSAL_SHARE = {"causal": 1.0, "mlm": 0.0, "hybrid": 0.25}


def small_config(family: str, mlp: str = "swiglu", scan_layers: bool = False) -> ModelConfig:
    return ModelConfig(family=family, vocab_size=V, d_model=D, num_layers=N, num_heads=2, d_ff=F, max_len=L, mlp=mlp,
                       scan_layers=scan_layers)


def test_hand_count_totals():
    assert HAND_FORWARD["causal"] == 49_408 and HAND_FORWARD["mlm"] == 53_504 and HAND_FORWARD["hybrid"] == 52_992


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
def test_forward_and_train_flops_match_hand_count(family):
    c = small_config(family)
    share = CAUSAL_SHARE[family]
    assert metrics.forward_flops_per_token(c, L, share) == pytest.approx(HAND_FORWARD[family], rel=1e-12)
    assert metrics.train_flops_per_token(c, L, share) == pytest.approx(3 * HAND_FORWARD[family], rel=1e-12)


def test_gelu_mlp_and_matmul_params():
    c = small_config("causal", mlp="gelu")
    assert metrics.matmul_params(c) == N * (3 * D * D + D * D + 2 * D * F)
    expected = N * (QKV + ATTN_OUT + GELU_MLP + (SCORES + MIX) / 2) + OUTPUT
    assert metrics.forward_flops_per_token(c, L, 1.0) == pytest.approx(expected, rel=1e-12)
    assert metrics.matmul_params(small_config("mlm")) == metrics.matmul_params(small_config("causal")) + D * D


def dot_flops(jaxpr) -> float:
    """FLOPs of every dot_general in a jaxpr (2 x output size x contracted size), sub-jaxprs included;
    of a `cond`, only the last branch (the true branch: the one the loss takes unless it overflows)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            contracted = np.prod([lhs[i] for i in lhs_contract]) if lhs_contract else 1
            total += 2.0 * np.prod(eqn.outvars[0].aval.shape) * contracted
        repeat = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        params = {"branches": eqn.params["branches"][-1:]} if eqn.primitive.name == "cond" else eqn.params
        for value in params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += repeat * dot_flops(inner)
    return total


def test_predicted_share_counts_the_head_and_projection_only_where_predicted():
    c = small_config("mlm")
    full = metrics.forward_flops_per_token(c, L, 0.0)
    assert full - metrics.forward_flops_per_token(c, L, 0.0, predicted_share=0.25) == 0.75 * (HEAD_TRANSFORM + OUTPUT)
    config = types.SimpleNamespace(model=types.SimpleNamespace(family="hybrid"),
                                   train=types.SimpleNamespace(hybrid_causal_share=0.25))
    assert metrics.predicted_share(config, 0.2) == pytest.approx(0.25 + 0.75 * 0.2)


# Predicted positions gathered by compute_loss at its default mask rate 0.15 (4 rows of 16):
# prediction_capacity rounds up to 8 slots; the hybrid's causal row (16 positions) always counts.
GATHERED = {"causal": 4 * L, "mlm": 32, "hybrid": 40}


@pytest.mark.parametrize("family,scan_layers", [("causal", False), ("mlm", False), ("hybrid", False), ("hybrid", True)])
def test_analytic_count_matches_the_models_matmuls(family, scan_layers):
    """The model computes full L x L attention on every row, i.e. the count with causal_share = 0;
    its gradient computes exactly twice the forward's matmuls (training = 3 x forward), with the
    head and the output projection at the gathered predicted positions only."""
    c = small_config(family, scan_layers=scan_layers)
    model = Transformer(c)
    tokens = jnp.ones((4, L), jnp.int32)
    batch = {"tokens": tokens, "segment_ids": jnp.ones_like(tokens), "positions": jnp.broadcast_to(jnp.arange(L), (4, L))}
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)
    forward = jax.make_jaxpr(lambda p: model.apply(p, tokens))(params).jaxpr
    assert dot_flops(forward) == pytest.approx(4 * L * metrics.forward_flops_per_token(c, L, 0.0), rel=1e-12)

    masking = objectives.MaskingConfig(mask_id=4, vocab_size=V, special_ids=tuple(range(7)))

    def loss(p):
        settings = objectives.LossSettings(masking=masking, hybrid_causal_share=0.25)  # 1 causal row of 4
        return objectives.compute_loss(model, p, batch, jax.random.key(1), settings=settings)[0]

    train = jax.make_jaxpr(jax.grad(loss))(params).jaxpr
    assert objectives.prediction_capacity(4 * L, 16 if family == "hybrid" else 0, 0.15, False, 8) == GATHERED[family] \
        or family == "causal"
    share = GATHERED[family] / (4 * L)
    assert dot_flops(train) == pytest.approx(3 * 4 * L * metrics.forward_flops_per_token(c, L, 0.0, share), rel=1e-12)


@pytest.mark.parametrize(
    "kind,peak",
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-40GB", 312e12),
        ("TPU v4", 275e12),
        ("TPU v5 lite", 197e12),  # v5e's device_kind
        ("TPU v5e", 197e12),
        ("TPU v5p", 459e12),
        ("TPU v5", 459e12),  # v5p's device_kind
    ],
)
def test_device_peak_table_lookup(kind, peak, monkeypatch):
    monkeypatch.setattr(jax, "devices", lambda *args: [types.SimpleNamespace(device_kind=kind)] * 4)
    monkeypatch.setattr(jax, "device_count", lambda *args: 4)
    value, source = peaks.device_peak_flops()
    assert value == 4 * peak and kind in source and "table" in source


def test_step_logger_counts_the_projection_at_the_predicted_positions(tmp_path):
    """The trainer's logged MFU of an mlm run counts the head and projection at the masked share
    of the positions, at the step's mask rate (0.3 -> 0.1 over 11 steps: 0.2 at step 6)."""
    from babylm_jax.config.files import load_config_file

    config = load_config_file(pathlib.Path(__file__).parents[1] / "configs" / "base_mlm.py")
    config.train.update(num_steps=11, mask_rate=0.3, mask_rate_final=0.1)
    config = RunConfig.from_config(config)
    c = small_config("mlm")
    logger = metrics.StepLogger(metrics.MetricsWriter(str(tmp_path)), c, config, log_every=6, last_step=11)
    entry = logger.step_done(6, {"loss": 1.0, "grad_norm": 1.0, "learning_rate": 1e-3}, words_seen=0.0)
    per_token = metrics.train_flops_per_token(c, config.train.seq_len, 0.0, predicted_share=0.2)
    assert entry["mfu"] == pytest.approx(entry["tokens_per_s"] * per_token / logger.peak_flops, rel=1e-6)
    assert per_token < metrics.train_flops_per_token(c, config.train.seq_len, 0.0)
