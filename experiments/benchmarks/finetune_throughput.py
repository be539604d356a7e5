"""Fine-tuning throughput: our step against the official PyTorch trainer's on the same model.

    python experiments/benchmarks/finetune_throughput.py [--family causal] [--examples 256] [--repeats 3]

The base config's model (random weights) is fine-tuned on synthetic classification examples
whose lengths spread over 16-128 tokens as CLUE's do. Two measures, each the best of
`--repeats` runs with the matmul peak probed before each (`conditions.py`):

1. MFU: `finetune.train_step` (the jitted AdamW step the CLUE track uses, dropout on) on
   full rows of `--length` tokens; analytic model FLOP/s over the matmul peak of this run
   and over the best known idle peak. FLOPs per step (multiply-add = 2, training = 3 x
   forward, as training/metrics.py): per token 2 x (per layer 4 D^2 + MLP weights) +
   attention 4 L D per layer (halved for causal rows); per row the head 2 x (D^2 + D K).
   The vocabulary projection is not run when fine-tuning, so it is not counted.
2. Against the official pipeline (evaluation_pipeline/finetune, when torch and transformers
   are installed): the model is exported (`hf.writer.write_export`) and loaded as the
   official trainer loads it (AutoModel + its ClassifierHead: LayerNorm, Linear, GELU,
   LayerNorm, Dropout 0.1, Linear; first token, or the last real one for causal models);
   its training step (batch 32 padded to the batch's longest row, cross-entropy, backward,
   AdamW, cosine LambdaLR step, the per-step accuracy) and its evaluation (batches of 64,
   no_grad) run interleaved with ours (`finetune.make_batches` length buckets, `train_step`,
   `predict_step`, configs/eval.py's buckets) on the same examples in this process.

Last lines: `finetune_mfu_vs_measured_peak`, `finetune_mfu_vs_idle_peak`,
`finetune_over_official_train` and `finetune_over_official_eval` (examples/s over examples/s).
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import configs.base  # noqa: E402
import configs.eval  # noqa: E402
from conditions import Conditions  # noqa: E402
from babylm_jax.corpus.tokenizer import CharTokenizer  # noqa: E402
from babylm_jax.eval import clue, finetune  # noqa: E402
from babylm_jax.config.model import ModelConfig  # noqa: E402
from babylm_jax.model.transformer import Transformer  # noqa: E402

NUM_LABELS = 2


def finetune_step_flops(c: ModelConfig, batch: int, length: int, num_labels: int) -> float:
    """Analytic training FLOPs of one fine-tuning step on full rows."""
    mlp = (3 if c.mlp == "swiglu" else 2) * c.d_model * c.d_ff
    per_token = 2 * c.num_layers * (4 * c.d_model * c.d_model + mlp)
    per_token += 4 * length * c.d_model * c.num_layers * (0.5 if c.family == "causal" else 1.0)
    per_row = 2 * (c.d_model * c.d_model + c.d_model * num_labels)
    return 3 * batch * (length * per_token + per_row)


def synthetic_split(rng: np.random.Generator, config: ModelConfig, count: int, lengths: tuple[int, int]) -> clue.EncodedSplit:
    """Sentence pairs framed as fine-tuning inputs ([bos] a [sep] b [eos], or [cls] ... [sep]), random lengths."""
    opener, closer = (2, 3) if config.family == "causal" else (5, 6)  # [bos]/[eos] or [cls]/[sep]
    rows = []
    for _ in range(count):
        total = int(rng.integers(*lengths)) - 3
        half = total // 2
        rows.append([[opener, *rng.integers(7, config.vocab_size, half), 6,
                      *rng.integers(7, config.vocab_size, total - half), closer]])
    return clue.EncodedSplit(rows, [int(x) for x in rng.integers(0, NUM_LABELS, count)], 0)


class Ours:
    """`finetune.train_step` / `predict_step` over `finetune.make_batches` (length buckets)."""

    def __init__(self, config: ModelConfig, body_params: dict, batch_size: int, max_len: int):
        self.model = finetune.FinetuneModel(config, NUM_LABELS, multiple_choice=False)
        head = finetune.ClassifierHead(NUM_LABELS).init(jax.random.key(1), jnp.zeros((1, config.d_model)))
        params = {"body": body_params["params"], "head": head["params"]}
        params = jax.tree.map(lambda x: jnp.array(x, jnp.float32), params)
        self.settings = finetune.StepSettings(weight_decay=0.01, max_grad_norm=1.0)
        self.mesh = finetune.data_mesh(batch_size)
        self.rows = NamedSharding(self.mesh, P("data"))
        self.state = jax.device_put((params, finetune.make_optimizer(self.settings).init(params)),
                                    NamedSharding(self.mesh, P()))
        self.batch_size, self.lengths = batch_size, finetune.bucket_lengths(max_len, tuple(configs.eval.get_config().finetune.length_buckets))
        self.key, self.step = jax.random.key(2), 0

    def train(self, split: clue.EncodedSplit, epoch: int) -> None:
        losses = []
        for batch in finetune.make_batches(split, self.batch_size, self.lengths, 1, np.random.default_rng(epoch)):
            self.state, loss = finetune.train_step(self.model, self.settings, self.state,
                                                   finetune._device_batch(batch, self.rows), self.key,
                                                   np.int32(self.step), np.float32(3e-5))
            losses.append(loss)
            self.step += 1
        jax.device_get(losses)

    def evaluate(self, split: clue.EncodedSplit) -> np.ndarray:
        predictions = [(finetune.predict_step(self.model, self.state[0], finetune._device_batch(b, self.rows)), b["index"])
                       for b in finetune.make_batches(split, self.batch_size, self.lengths, 1)]
        out = np.zeros(len(split.labels), np.int64)
        for pred, index in jax.device_get(predictions):
            out[index[index >= 0]] = pred[index >= 0]
        return out


class Official:
    """The official pipeline's ModelForSequenceClassification, Trainer.train_epoch and evaluate, reproduced."""

    def __init__(self, export_dir: pathlib.Path, family: str, hidden: int, batch_size: int, num_steps: int):
        import torch
        import transformers

        torch.manual_seed(42)
        self.torch, self.causal = torch, family == "causal"
        self.transformer = transformers.AutoModel.from_pretrained(export_dir, trust_remote_code=True)
        self.classifier = torch.nn.Sequential(
            torch.nn.LayerNorm(hidden, 1e-5, elementwise_affine=False), torch.nn.Linear(hidden, hidden),
            torch.nn.GELU(), torch.nn.LayerNorm(hidden, 1e-5, elementwise_affine=False), torch.nn.Dropout(0.1),
            torch.nn.Linear(hidden, NUM_LABELS))
        self.model = torch.nn.ModuleDict({"transformer": self.transformer, "classifier": self.classifier})
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-5, betas=(0.9, 0.999), eps=1e-8,
                                           weight_decay=0.01)
        warmup = int(0.06 * num_steps)

        def cosine(step: int) -> float:  # the pipeline's cosine_schedule_with_warmup, min factor 0.1
            if step < warmup:
                return step / max(1, warmup)
            progress = (step - warmup) / max(1, num_steps - warmup)
            return max(0.1, 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, cosine)
        self.batch_size = batch_size

    def forward(self, tokens, mask):
        encoding = self.transformer(input_ids=tokens, attention_mask=mask).last_hidden_state
        if self.causal:  # --take_final --causal: the last real token
            pooled = encoding[self.torch.arange(encoding.size(0)), mask.long().sum(-1) - 1]
        else:
            pooled = encoding[:, 0]
        return self.classifier(pooled)

    def batches(self, split: clue.EncodedSplit, batch_size: int, order: np.ndarray):
        """The collate function's output: right-padded to the batch's longest row."""
        torch = self.torch
        for start in range(0, len(order), batch_size):
            members = order[start:start + batch_size]
            rows = [split.ids[i][0] for i in members]
            length = max(map(len, rows))
            tokens = torch.zeros((len(rows), length), dtype=torch.long)
            mask = torch.zeros((len(rows), length), dtype=torch.long)
            for r, row in enumerate(rows):
                tokens[r, : len(row)], mask[r, : len(row)] = torch.tensor(row), 1
            yield tokens, mask, torch.tensor([split.labels[i] for i in members])

    def train(self, split: clue.EncodedSplit, epoch: int) -> None:
        torch = self.torch
        self.model.train()
        self.optimizer.zero_grad()
        order = np.random.default_rng(epoch).permutation(len(split.labels))
        for tokens, mask, labels in self.batches(split, self.batch_size, order):
            logits = self.forward(tokens, mask)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
            float((logits.argmax(-1) == labels).float().mean())  # calculate_metrics, every step
            self.optimizer.zero_grad()

    def evaluate(self, split: clue.EncodedSplit) -> np.ndarray:
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            logits = [self.forward(tokens, mask)
                      for tokens, mask, _ in self.batches(split, 64, np.arange(len(split.labels)))]
        return torch.cat(logits).argmax(-1).numpy()


def seconds_of(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="causal", choices=("causal", "mlm", "hybrid"))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per repeat of the MFU measure")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="row length of the MFU measure (and the longest row)")
    parser.add_argument("--examples", type=int, default=256, help="training and evaluation examples of the comparison")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    conditions = Conditions.start()
    model_config = configs.base.get_config().model
    model_config.family = args.family
    config = ModelConfig.from_config(model_config)
    body = Transformer(config)
    body_params = nn.meta.unbox(jax.jit(body.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
    rng = np.random.default_rng(0)

    # 1. MFU on full rows.
    ours = Ours(config, body_params, args.batch_size, args.length)
    full = synthetic_split(rng, config, args.batch_size, (args.length, args.length + 1))
    (full_batch,) = finetune.make_batches(full, args.batch_size, (args.length,), 1)
    device_batch = finetune._device_batch(full_batch, ours.rows)

    def steps(count: int) -> None:
        for i in range(count):
            ours.state, loss = finetune.train_step(ours.model, ours.settings, ours.state, device_batch, ours.key,
                                                   np.int32(i), np.float32(3e-5))
        loss.block_until_ready()

    start = time.perf_counter()
    steps(1)
    print(f"model: {args.family} d{config.d_model} x{config.num_layers} layers, batch {args.batch_size}, "
          f"length {args.length}, devices {ours.mesh.devices.size}; compile + first step {time.perf_counter() - start:.1f}s")
    step_seconds = []
    for _ in range(args.repeats):
        conditions.probe()
        step_seconds.append(seconds_of(steps, args.steps) / args.steps)
    step_time = min(step_seconds)
    achieved = finetune_step_flops(config, args.batch_size, args.length, NUM_LABELS) / step_time
    print(f"full rows: step {step_time * 1e3:.1f} ms (best of {args.repeats} x {args.steps} steps); "
          f"{args.batch_size / step_time:.1f} examples/s; model {achieved / 1e9:.2f} GFLOP/s")

    # 2. Against the official trainer, same examples, interleaved.
    train = synthetic_split(rng, config, args.examples, (16, args.length + 1))
    dev = synthetic_split(rng, config, args.examples, (16, args.length + 1))
    official = None
    try:
        from babylm_jax.hf import writer

        tokenizer = CharTokenizer([chr(c) for c in range(0x4E00, 0x4E00 + 100)], byte_fallback=True)
        export_dir = tempfile.TemporaryDirectory(prefix="finetune_throughput_")
        out = writer.write_export(pathlib.Path(export_dir.name) / "hf", config, body_params, tokenizer,
                                  provenance={"benchmark": "finetune_throughput"})
        batches_per_epoch = -(-args.examples // args.batch_size)
        official = Official(out, args.family, config.d_model, args.batch_size, (args.repeats + 1) * batches_per_epoch)
    except ImportError as error:
        print(f"official trainer skipped: {error} (pip install -e '.[export]')")
    ours.train(train, 0)  # compiles every bucket
    ours.evaluate(dev)
    times = {k: [] for k in ("ours_train", "ours_eval", "official_train", "official_eval")}
    for repeat in range(args.repeats):
        conditions.probe()
        times["ours_train"].append(seconds_of(ours.train, train, repeat + 1))
        times["ours_eval"].append(seconds_of(ours.evaluate, dev))
        if official is not None:
            if repeat == 0:  # warm-up, as ours was
                official.train(clue.EncodedSplit(train.ids[:64], train.labels[:64], 0), 0)
            times["official_train"].append(seconds_of(official.train, train, repeat + 1))
            times["official_eval"].append(seconds_of(official.evaluate, dev))
    rates = {k: args.examples / min(v) for k, v in times.items() if v}
    padded = sum(len(b["tokens"]) * b["tokens"].shape[-1] for b in finetune.make_batches(train, args.batch_size, ours.lengths, 1))
    lengths = np.asarray([len(r[0]) for r in train.ids])
    order = np.random.default_rng(1).permutation(len(lengths))
    official_padded = sum(len(c) * lengths[c].max() for c in np.array_split(order, -(-len(order) // args.batch_size)))
    print(f"{args.examples} examples of 16-{args.length} tokens; real/padded tokens: ours {lengths.sum() / padded:.2f} "
          f"(buckets {ours.lengths}, fixed batches), official {lengths.sum() / official_padded:.2f} (each batch padded "
          f"to its longest, shuffled); examples/s, best of {args.repeats}:")
    for k, v in rates.items():
        print(f"  {k}: {v:,.1f}")
    conditions.report()
    print(f"finetune_mfu_vs_measured_peak: {achieved / conditions.run_peak:.2f}")
    print(f"finetune_mfu_vs_idle_peak: {achieved / conditions.best_peak:.2f}")
    if official is not None:
        print(f"finetune_over_official_train: {rates['ours_train'] / rates['official_train']:.2f}")
        print(f"finetune_over_official_eval: {rates['ours_eval'] / rates['official_eval']:.2f}")


if __name__ == "__main__":
    main()
