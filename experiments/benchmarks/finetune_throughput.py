"""Fine-tuning throughput and MFU: the base config's model, batch 32, length 128.

    python experiments/benchmarks/finetune_throughput.py [--family causal] [--steps 20]

Runs `finetune.train_step` (the jitted AdamW step the CLUE track uses, dropout on) on
full-length synthetic rows, reports examples/s, and divides the step's analytic model
FLOP/s by a large jitted float32 matmul's FLOP/s measured in this process. Last line:
`finetune_mfu_vs_measured_peak: 0.NN`.

FLOPs per step (multiply-add = 2, training = 3 x forward, as training/metrics.py): per
token 2 x (per layer 4 D^2 + MLP weights) + attention 4 L D per layer (halved for causal
rows); per row the head 2 x (D^2 + D K). The vocabulary projection is not run when
fine-tuning, so it is not counted.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import configs.base  # noqa: E402
from babylm_jax.eval import clue, finetune  # noqa: E402
from babylm_jax.model.transformer import ModelConfig, Transformer  # noqa: E402
from babylm_jax.training.metrics import measure_matmul_peak  # noqa: E402

NUM_LABELS = 2


def finetune_step_flops(c: ModelConfig, batch: int, length: int, num_labels: int) -> float:
    """Analytic training FLOPs of one fine-tuning step on full rows."""
    mlp = (3 if c.mlp == "swiglu" else 2) * c.d_model * c.d_ff
    per_token = 2 * c.num_layers * (4 * c.d_model * c.d_model + mlp)
    per_token += 4 * length * c.d_model * c.num_layers * (0.5 if c.family == "causal" else 1.0)
    per_row = 2 * (c.d_model * c.d_model + c.d_model * num_labels)
    return 3 * batch * (length * per_token + per_row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="causal", choices=("causal", "mlm", "hybrid"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()

    model_config = configs.base.get_config().model
    model_config.family = args.family
    config = ModelConfig.from_config(model_config)
    body = Transformer(config)
    body_params = nn.meta.unbox(jax.jit(body.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
    model = finetune.FinetuneModel(config, NUM_LABELS, multiple_choice=False)
    head = finetune.ClassifierHead(NUM_LABELS).init(jax.random.key(1), jnp.zeros((1, config.d_model)))
    params = {"body": body_params["params"], "head": head["params"]}
    settings = finetune.StepSettings(weight_decay=0.01, max_grad_norm=1.0)
    mesh = finetune.data_mesh(args.batch_size)
    state = jax.device_put((params, finetune.make_optimizer(settings).init(params)), NamedSharding(mesh, P()))

    rng = np.random.default_rng(0)
    opener, closer = (2, 3) if config.family == "causal" else (5, 6)  # [bos]/[eos] or [cls]/[sep]
    half = (args.length - 3) // 2
    rows = [
        [[opener, *rng.integers(7, config.vocab_size, half), 6, *rng.integers(7, config.vocab_size, args.length - 3 - half), closer]]
        for _ in range(args.batch_size)
    ]
    split = clue.EncodedSplit(rows, [i % NUM_LABELS for i in range(args.batch_size)], 0)
    (batch,) = finetune.make_batches(split, args.batch_size, (args.length,), 1)
    device_batch = {k: jax.device_put(v, NamedSharding(mesh, P("data"))) for k, v in batch.items()}
    key = jax.random.key(2)

    def step(state, i):
        return finetune.train_step(model, settings, state, device_batch, key, np.int32(i), np.float32(3e-5))

    start = time.perf_counter()
    state, loss = step(state, 0)
    loss.block_until_ready()
    print(f"model: {args.family} d{config.d_model} x{config.num_layers} layers, batch {args.batch_size}, "
          f"length {args.length}, devices {mesh.devices.size}; compile + first step {time.perf_counter() - start:.1f}s")
    times = []
    for i in range(1, args.steps + 1):
        start = time.perf_counter()
        state, loss = step(state, i)
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
    step_time = float(np.median(times))
    flops = finetune_step_flops(config, args.batch_size, args.length, NUM_LABELS)
    peak = measure_matmul_peak()
    achieved = flops / step_time
    print(f"step time (median of {args.steps}): {step_time * 1e3:.1f} ms; loss {float(loss):.4f}")
    print(f"examples/s: {args.batch_size / step_time:.1f}; tokens/s: {args.batch_size * args.length / step_time:.0f}")
    print(f"model FLOP/s: {achieved / 1e9:.2f} GFLOP/s; measured f32 matmul peak: {peak / 1e9:.2f} GFLOP/s")
    print(f"finetune_mfu_vs_measured_peak: {achieved / peak:.2f}")


if __name__ == "__main__":
    main()
