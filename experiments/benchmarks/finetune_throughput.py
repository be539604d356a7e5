"""Fine-tuning throughput: our step against the official PyTorch trainer's on the same model.

    BABYLM_DATA_DIR=../shared/data python experiments/benchmarks/finetune_throughput.py \
        [--family causal] [--tasks afqmc,ocnli] [--examples 1024] [--repeats 3]

The base config's model (random weights) is fine-tuned on classification examples whose
lengths are those of real training examples: per task in `--tasks`, `--examples` rows drawn
from its train.json under $BABYLM_DATA_DIR, each `[bos] sentence1 [eos] sentence2 [eos]` with
one token per character as the base model's character tokenizer gives (without the data
directory: uniform 16-128 tokens, said so). Two measures, each the best of `--repeats` runs
with the matmul peak probed before each (`conditions.py`):

1. MFU: `classifier.finetune_step` (the jitted AdamW step of the CLUE track, dropout on) on full
   rows of `--length` tokens, one example a row; analytic model FLOP/s over the matmul peak
   of this run and over the best known idle peak. FLOPs per step (multiply-add = 2, training
   = 3 x forward, as training/metrics.py): per token 2 x (per layer 4 D^2 + MLP weights) +
   attention 4 L D per layer (halved for causal rows); per row the head 2 x (D^2 + D K).
   The vocabulary projection is not run when fine-tuning, so it is not counted.
2. Against the official pipeline (evaluation_pipeline/finetune at 2c8a2d9 = upstream 7c50ed2,
   when torch and transformers are installed): the model is exported
   (`hf.writer.write_export`) and loaded as the official trainer loads it (AutoModel + its
   ClassifierHead: LayerNorm, Linear, GELU, LayerNorm, Dropout 0.1, Linear; first token, or
   the last real one for causal models); its training step (batch 32 padded to the batch's
   longest row, shuffled, last partial batch dropped; cross-entropy, backward, AdamW, the
   cosine LambdaLR step, the per-step accuracy) and its evaluation (batches of 64 in file
   order, no_grad) run interleaved with ours (`example_packing` batches: examples packed
   whole into rows of `--length` tokens; `finetune_step`, `predict_step`) on the same examples
   in this process.

Last lines: `finetune_mfu_vs_measured_peak`, `finetune_mfu_vs_idle_peak`,
`finetune_over_official_train` and `finetune_over_official_eval` (examples/s over examples/s).
"""
from __future__ import annotations

import argparse
import json
import math
import os
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
from babylm_jax.config.evaluation import default_settings  # noqa: E402
from conditions import Conditions  # noqa: E402
from babylm_jax.corpus.tokenizer import CharTokenizer  # noqa: E402
from babylm_jax.eval.finetune import classifier, clue, example_packing as packing  # noqa: E402
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


def row_of(rng: np.random.Generator, config: ModelConfig, length: int) -> list[int]:
    """A framed pair of `length` tokens, [bos] a [sep] b [eos] (or [cls] ... [sep]), random ids."""
    opener, closer = (2, 3) if config.family == "causal" else (5, 6)  # [bos]/[eos] or [cls]/[sep]
    half = (length - 3) // 2
    return [opener, *rng.integers(7, config.vocab_size, half), 6, *rng.integers(7, config.vocab_size, length - 3 - half), closer]


def real_lengths(rng: np.random.Generator, tasks: list[str], count: int, max_len: int) -> tuple[np.ndarray, str]:
    """`count` example lengths per task from its train.json (characters of sentence1 + sentence2 + 3 special
    tokens, capped at max_len), or uniform 16..max_len without $BABYLM_DATA_DIR; and where they came from."""
    data_dir = pathlib.Path(os.environ.get("BABYLM_DATA_DIR", ""))
    if not os.environ.get("BABYLM_DATA_DIR") or not all((data_dir / t / "train.json").is_file() for t in tasks):
        return rng.integers(16, max_len + 1, count * len(tasks)), f"uniform 16-{max_len} tokens (no BABYLM_DATA_DIR)"
    lengths = []
    for task in tasks:
        rows = [json.loads(line) for line in (data_dir / task / "train.json").open(encoding="utf-8")]
        chosen = rng.choice(len(rows), count, replace=False)
        lengths += [min(max_len, len(rows[i]["sentence1"]) + len(rows[i]["sentence2"]) + 3) for i in chosen]
    return np.asarray(lengths), f"{', '.join(tasks)} train.json lengths"


def split_of(rng: np.random.Generator, config: ModelConfig, lengths: np.ndarray) -> clue.EncodedSplit:
    return clue.EncodedSplit([[row_of(rng, config, int(n))] for n in lengths],
                             [int(x) for x in rng.integers(0, NUM_LABELS, len(lengths))], 0)


class Ours:
    """`classifier.finetune_step` / `predict_step` over `example_packing` batches."""

    def __init__(self, config: ModelConfig, body_params: dict, batch_size: int, max_len: int):
        self.model = classifier.FinetuneModel(config, NUM_LABELS, multiple_choice=False)
        head = classifier.ClassifierHead(NUM_LABELS).init(jax.random.key(1), jnp.zeros((1, config.d_model)))
        params = {"body": body_params["params"], "head": head["params"]}
        params = jax.tree.map(lambda x: jnp.array(x, jnp.float32), params)
        self.settings = classifier.StepSettings(weight_decay=0.01, max_grad_norm=0.0)
        self.mesh = classifier.data_mesh()
        self.rows, self.slots = NamedSharding(self.mesh, P("data")), NamedSharding(self.mesh, P())
        self.state = jax.device_put((params, classifier.finetune_optimizer(self.settings).init(params)), self.slots)
        defaults = default_settings().finetune["afqmc"]
        self.batch_size, self.max_len, self.last = batch_size, max_len, config.family == "causal"
        self.rows_multiple, self.eval_rows = defaults.rows_multiple, defaults.eval_rows
        self.key, self.step = jax.random.key(2), 0

    def train_batches(self, split: clue.EncodedSplit, epoch: int) -> list[packing.Batch]:
        plan = packing.TrainPlan(split, self.batch_size, self.max_len, self.rows_multiple, epoch, 1)
        return list(plan.batches(0, 1, self.last))

    def eval_batches(self, split: clue.EncodedSplit) -> list[packing.Batch]:
        slots = self.eval_rows * max(1, self.max_len // min(len(r[0]) for r in split.ids))
        return packing.eval_batches(split, self.max_len, self.eval_rows, min(slots, len(split.ids)), 1, self.last)

    def device(self, batch: packing.Batch) -> dict:
        return classifier._device_batch(batch, self.rows, self.slots)

    def train(self, split: clue.EncodedSplit, epoch: int) -> None:
        losses = []
        for batch in self.train_batches(split, epoch):
            self.state, loss = classifier.finetune_step(self.model, self.settings, self.state, self.device(batch),
                                                        self.key, np.int32(self.step), np.float32(3e-5))
            losses.append(loss)
            self.step += 1
        jax.device_get(losses)

    def evaluate(self, split: clue.EncodedSplit) -> np.ndarray:
        predictions = [(classifier.predict_step(self.model, self.state[0], self.device(b)), b["index"])
                       for b in self.eval_batches(split)]
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
        order = order[: len(order) // self.batch_size * self.batch_size]  # DataLoader(drop_last=True)
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


def padding_report(ours: Ours, train: clue.EncodedSplit, batch_size: int) -> str:
    """Real tokens over computed ones: our packed rows, and the official batches padded to their longest."""
    real, rows = packing.padded_tokens(ours.train_batches(train, 1))
    lengths = np.asarray([len(r[0]) for r in train.ids])
    order = np.random.default_rng(1).permutation(len(lengths))[: len(lengths) // batch_size * batch_size]
    chunks = order.reshape(-1, batch_size)
    official = sum(len(c) * lengths[c].max() for c in chunks)
    return (f"real/computed tokens: ours {real / rows:.2f} (packed rows of {ours.max_len}), official "
            f"{lengths[order].sum() / official:.2f} (each batch padded to its longest, shuffled)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="causal", choices=("causal", "mlm", "hybrid"))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per repeat of the MFU measure")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="row length (the MFU measure's, and max_len)")
    parser.add_argument("--tasks", default="afqmc,ocnli", help="tasks whose training lengths the comparison uses")
    parser.add_argument("--examples", type=int, default=512, help="training and evaluation examples per task")
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
    (full_batch,) = ours.train_batches(split_of(rng, config, np.full(args.batch_size, args.length)), 0)
    device_batch = ours.device(full_batch)

    def steps(count: int) -> None:
        for i in range(count):
            ours.state, loss = classifier.finetune_step(ours.model, ours.settings, ours.state, device_batch, ours.key,
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
    tasks = args.tasks.split(",")
    train_lengths, source = real_lengths(rng, tasks, args.examples, args.length)
    dev_lengths, _ = real_lengths(rng, tasks, args.examples, args.length)
    train, dev = split_of(rng, config, train_lengths), split_of(rng, config, dev_lengths)
    official = None
    try:
        from babylm_jax.hf import writer

        tokenizer = CharTokenizer([chr(c) for c in range(0x4E00, 0x4E00 + 100)], byte_fallback=True)
        export_dir = tempfile.TemporaryDirectory(prefix="finetune_throughput_")
        out = writer.write_export(pathlib.Path(export_dir.name) / "hf", config, body_params, tokenizer,
                                  provenance={"benchmark": "finetune_throughput"})
        batches_per_epoch = len(train.ids) // args.batch_size
        official = Official(out, args.family, config.d_model, args.batch_size, (args.repeats + 1) * batches_per_epoch)
    except ImportError as error:
        print(f"official trainer skipped: {error} (pip install -e '.[export]')")
    ours.train(train, 0)  # compiles every shape
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
    trained = len(train.ids) // args.batch_size * args.batch_size
    rates = {k: (trained if k.endswith("train") else len(dev.ids)) / min(v) for k, v in times.items() if v}
    print(f"{len(train.ids)} training and {len(dev.ids)} dev examples, {source} (mean {train_lengths.mean():.0f} "
          f"tokens); {padding_report(ours, train, args.batch_size)}; examples/s, best of {args.repeats}:")
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
