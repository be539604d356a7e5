"""Fine-tuning track: the official classifier head on the pretrained body, one training loop.

The fine-tuned model is the pretrained `Transformer` (via `Transformer.encode`, all of its
parameters trained) plus `ClassifierHead`: LayerNorm -> Dense -> GELU -> LayerNorm ->
Dropout(0.1) -> Dense, read at the first real token (mlm/hybrid) or at the last real token
(causal), both found from the attention mask. Classification and multiple choice share the
loop: a batch is [B, C, L] rows (C = 1 for classification, one row per option otherwise);
options are scored by the shared head and compared by softmax.

Official protocol: AdamW lr 3e-5, batch 32, 10 epochs (cluewsc2020 30), max length 128,
6% warmup then cosine, weight decay 0.01, seed 42 (configs/eval.py, `finetune.*`); score =
dev accuracy at the best epoch.
Rows are padded to a few length buckets, so a task compiles one train and one eval
step per bucket; batches are split over a data-parallel mesh of the local devices.
"""
from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib.figure
import matplotlib.ticker
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm.auto import tqdm

from babylm_jax.eval import clue
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.eval.results import TaskResult
from babylm_jax.eval.settings import EvalSettings, FinetuneOptions
from babylm_jax.tasks.registry import TaskSpec
from babylm_jax.model.loaded import LoadedModel, Params
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer, weight_decay_mask

NEG_INF = -1e9  # score of a padded option slot


@dataclasses.dataclass(frozen=True)
class FinetuneOutcome:
    """What one fine-tuning run measured; epochs are numbered from 1."""

    dev_accuracy: list[float]  # per epoch
    train_loss: list[float]  # per epoch, mean over its steps
    best_epoch: int
    best_predictions: np.ndarray  # dev predictions at the best epoch, in example order
    num_truncated: dict[str, int]  # split -> rows cut to max_len
    num_steps: int

    @property
    def best_accuracy(self) -> float:
        return self.dev_accuracy[self.best_epoch - 1]


class ClassifierHead(nn.Module):
    """LayerNorm -> Dense(D) -> GELU -> LayerNorm -> Dropout -> Dense(num_outputs)."""

    num_outputs: int
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, pooled_RxD: jax.Array, deterministic: bool = True) -> jax.Array:
        d = pooled_RxD.shape[-1]
        x = nn.LayerNorm(name="norm_in")(pooled_RxD.astype(jnp.float32))
        x = nn.gelu(nn.Dense(d, name="dense")(x), approximate=False)
        x = nn.LayerNorm(name="norm_out")(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        return nn.Dense(self.num_outputs, name="out")(x)


def pool_index(mask_RxL: jax.Array, last: bool) -> jax.Array:
    """[R] index of the first (or last) real token of each row, from the attention mask.

    Works with left and right padding; an all-padding row gives 0 (or L-1).
    """
    length = mask_RxL.shape[-1]
    mask = mask_RxL.astype(bool)
    if last:
        return length - 1 - jnp.argmax(mask[:, ::-1], axis=-1)
    return jnp.argmax(mask, axis=-1)


def positions_from_mask(mask_RxL: jax.Array) -> jax.Array:
    """Positions counted over real tokens only (so left padding does not shift them)."""
    return jnp.maximum(jnp.cumsum(mask_RxL.astype(jnp.int32), axis=-1) - 1, 0)


class FinetuneModel(nn.Module):
    """The pretrained body plus the classifier head; params {"body": ..., "head": ...}."""

    body_config: ModelConfig
    num_outputs: int
    multiple_choice: bool
    head_dropout: float = 0.1

    def setup(self) -> None:
        self.body = Transformer(self.body_config)
        self.head = ClassifierHead(self.num_outputs, self.head_dropout)

    def __call__(self, tokens_BxCxL: jax.Array, mask_BxCxL: jax.Array, deterministic: bool = True) -> jax.Array:
        """Logits [B, K]: per label (classification) or per option (multiple choice)."""
        b, c, length = tokens_BxCxL.shape
        tokens_RxL = tokens_BxCxL.reshape(b * c, length)
        mask_RxL = mask_BxCxL.reshape(b * c, length)
        hidden_RxLxD, _ = self.body.encode(
            tokens_RxL, mask_RxL.astype(jnp.int32), positions_from_mask(mask_RxL), deterministic=deterministic
        )
        index_R = pool_index(mask_RxL, last=self.body_config.family == "causal")
        pooled_RxD = jnp.take_along_axis(hidden_RxLxD, index_R[:, None, None], axis=1)[:, 0]
        out_RxK = self.head(pooled_RxD, deterministic)
        if not self.multiple_choice:
            return out_RxK.reshape(b, c, -1)[:, 0]
        option_present_BxC = mask_BxCxL.any(axis=-1)
        return jnp.where(option_present_BxC, out_RxK.reshape(b, c), NEG_INF)


def bucket_lengths(max_len: int, buckets: tuple[int, ...]) -> tuple[int, ...]:
    """The padded row lengths in use: the buckets below `max_len`, and `max_len` itself."""
    return tuple(sorted({b for b in buckets if 0 < b < max_len} | {max_len}))


def make_batches(
    split: clue.EncodedSplit,
    batch_size: int,
    lengths: tuple[int, ...],
    num_rows: int,
    rng: np.random.Generator | None = None,
) -> list[dict[str, np.ndarray]]:
    """Fixed-size batches, each padded to one of `lengths`; shuffled when `rng` is given.

    Keys: tokens/mask [B, C, L], labels [B], index [B] (example index, -1 on filler rows
    of a bucket's last batch). Examples are grouped by the bucket their longest row fits.
    """
    by_bucket: dict[int, list[int]] = {length: [] for length in lengths}
    for i, rows in enumerate(split.ids):
        longest = max(len(r) for r in rows)
        by_bucket[next(length for length in lengths if length >= longest)].append(i)
    batches = []
    for length, members in by_bucket.items():
        order = np.asarray(members, dtype=np.int64)
        if rng is not None:
            order = rng.permutation(order)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            tokens = np.zeros((batch_size, num_rows, length), np.int32)
            mask = np.zeros((batch_size, num_rows, length), bool)
            index = np.full((batch_size,), -1, np.int32)
            labels = np.zeros((batch_size,), np.int32)
            for slot, i in enumerate(chunk):
                index[slot], labels[slot] = i, split.labels[i]
                for c, row in enumerate(split.ids[i]):
                    tokens[slot, c, : len(row)] = row
                    mask[slot, c, : len(row)] = True
            batches.append({"tokens": tokens, "mask": mask, "labels": labels, "index": index})
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def data_mesh(batch_size: int, devices: list | None = None) -> Mesh:
    """A 1-D `data` mesh over as many local devices as evenly split the batch."""
    devices = list(jax.local_devices() if devices is None else devices)
    count = max(k for k in range(1, len(devices) + 1) if batch_size % k == 0)
    return Mesh(np.asarray(devices[:count]), ("data",))


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """The static part of the optimizer; the learning rate is passed per step."""

    weight_decay: float
    max_grad_norm: float


def learning_rate_schedule(options: FinetuneOptions, num_steps: int) -> optax.Schedule:
    """Linear warmup over `warmup_ratio` of the steps, then cosine decay to 0."""
    warmup = int(options.warmup_ratio * num_steps)
    return optax.warmup_cosine_decay_schedule(0.0, options.learning_rate, warmup, max(num_steps, warmup + 1), 0.0)


def make_optimizer(settings: StepSettings) -> optax.GradientTransformation:
    """AdamW (b2 0.999, eps 1e-8) with clipping, without the learning rate; decay on the
    matmul kernels only, as in pretraining. Updates are scaled by -lr in `train_step`."""
    return optax.chain(
        optax.clip_by_global_norm(settings.max_grad_norm),
        optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8),
        optax.add_decayed_weights(settings.weight_decay, mask=weight_decay_mask),
    )


def _device_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    return {k: jax.device_put(batch[k], sharding) for k in ("tokens", "mask", "labels", "index")}


def _loss(model: FinetuneModel, params: dict, batch: dict, dropout_key: jax.Array) -> jax.Array:
    """Mean cross-entropy over real examples (filler rows, index -1, get no weight)."""
    logits_BxK = model.apply(
        {"params": params}, batch["tokens"], batch["mask"], deterministic=False, rngs={"dropout": dropout_key}
    )
    weights_B = (batch["index"] >= 0).astype(jnp.float32)
    losses_B = optax.softmax_cross_entropy_with_integer_labels(logits_BxK, batch["labels"])
    return jnp.sum(losses_B * weights_B) / jnp.maximum(jnp.sum(weights_B), 1.0)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2,))
def train_step(
    model: FinetuneModel,
    settings: StepSettings,
    state: tuple[dict, Any],
    batch: dict,
    dropout_key: jax.Array,
    step: jax.Array,
    learning_rate: jax.Array,
) -> tuple[tuple[dict, Any], jax.Array]:
    """One AdamW step on (params, opt_state); module-level so equal setups share compiles."""
    params, opt_state = state
    loss_fn = functools.partial(_loss, model)
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, jax.random.fold_in(dropout_key, step))
    updates, opt_state = make_optimizer(settings).update(grads, opt_state, params)
    params = jax.tree.map(lambda p, u: p - learning_rate * u, params, updates)
    return (params, opt_state), loss


@functools.partial(jax.jit, static_argnums=(0,))
def predict_step(model: FinetuneModel, params: dict, batch: dict) -> jax.Array:
    """Predicted label (or option) per example [B]."""
    return jnp.argmax(model.apply({"params": params}, batch["tokens"], batch["mask"]), axis=-1)


def finetune(
    body_model: Transformer,
    body_params: Params,
    task: clue.ClueTask,
    tokenizer: Tokenizer,
    options: FinetuneOptions,
) -> FinetuneOutcome:
    """Fine-tunes body + a fresh head on `task.train`; dev accuracy after every epoch."""
    config = body_model.config
    epochs = options.epochs
    if options.max_len > config.max_len:
        raise ValueError(f"config key finetune.max_len={options.max_len} is longer than the model's "
                         f"max_len={config.max_len}; set it to at most {config.max_len}")
    train = clue.encode_split(task.train, tokenizer, config.family, options.max_len)
    dev = clue.encode_split(task.dev, tokenizer, config.family, options.max_len)
    num_rows = max(len(rows) for rows in train.ids + dev.ids)
    lengths = bucket_lengths(options.max_len, options.length_buckets)
    mesh = data_mesh(options.batch_size)
    rows_sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

    model = FinetuneModel(config, task.num_outputs, task.kind == "multiple_choice", options.head_dropout)
    key = jax.random.PRNGKey(options.seed)
    params = _initial_params(body_params, task.num_outputs, config.d_model, jax.random.fold_in(key, 0))

    steps_per_epoch = len(make_batches(train, options.batch_size, lengths, num_rows))
    num_steps = epochs * steps_per_epoch
    learning_rates = np.asarray(learning_rate_schedule(options, num_steps)(np.arange(num_steps)), np.float32)
    settings = StepSettings(options.weight_decay, options.max_grad_norm)
    state = jax.device_put((params, make_optimizer(settings).init(params)), replicated)
    dropout_key = jax.random.fold_in(key, 1)

    dev_batches = [_device_batch(b, rows_sharding) for b in make_batches(dev, options.batch_size, lengths, num_rows)]
    dev_labels = np.asarray(dev.labels)
    dev_accuracy, train_loss, best_predictions = [], [], None
    step = 0
    with tqdm(total=num_steps, desc=f"finetune {task.name}", unit="step", disable=not options.progress) as bar:
        for epoch in range(epochs):
            shuffle = np.random.default_rng([options.seed, epoch])
            losses = []
            for batch in make_batches(train, options.batch_size, lengths, num_rows, shuffle):
                state, loss = train_step(model, settings, state, _device_batch(batch, rows_sharding),
                                         dropout_key, np.int32(step), learning_rates[step])
                losses.append(loss)
                step += 1
                bar.update()
            predicted = _dev_predictions(model, state[0], dev_batches, len(dev_labels),
                                         f"{task.name} dev, epoch {epoch + 1}", options.progress)
            accuracy = float(np.mean(predicted == dev_labels))
            train_loss.append(float(np.mean(jax.device_get(losses))))
            if not dev_accuracy or accuracy > max(dev_accuracy):
                best_predictions = predicted
            dev_accuracy.append(accuracy)
            bar.set_postfix(epoch=epoch + 1, loss=f"{train_loss[-1]:.4f}", dev_acc=f"{accuracy:.4f}")
    return FinetuneOutcome(dev_accuracy=dev_accuracy, train_loss=train_loss, best_epoch=int(np.argmax(dev_accuracy)) + 1,
                           best_predictions=best_predictions, num_steps=num_steps,
                           num_truncated={"train": train.num_truncated, "dev": dev.num_truncated})


def _initial_params(body_params: Params, num_outputs: int, d_model: int, key: jax.Array) -> Params:
    """The pretrained body and a fresh head, as a float32 copy (train_step donates it)."""
    head_params = ClassifierHead(num_outputs).init(key, jnp.zeros((1, d_model)))
    params = {"body": nn.meta.unbox(body_params)["params"], "head": head_params["params"]}
    return jax.tree.map(lambda x: jnp.array(x, jnp.float32), params)


def _dev_predictions(model: nn.Module, params: Params, dev_batches: list, num_examples: int, desc: str,
                     progress: bool) -> np.ndarray:
    """The predicted class of every dev example: all batches dispatched, then fetched as they finish."""
    predictions = [(predict_step(model, params, b), b["index"]) for b in dev_batches]
    predicted = np.zeros(num_examples, np.int64)
    for done in tqdm(predictions, desc=desc, unit="batch", leave=False, disable=not progress):
        pred, index = jax.device_get(done)
        predicted[index[index >= 0]] = pred[index >= 0]
    return predicted


def per_group_accuracy(examples: list[clue.Example], predictions: np.ndarray) -> dict[str, float]:
    """Accuracy per `Example.group` (diagnostic_nli phenomena)."""
    correct: dict[str, list[bool]] = {}
    for example, predicted in zip(examples, predictions):
        correct.setdefault(example.group, []).append(bool(predicted == example.label))
    return {group: float(np.mean(hits)) for group, hits in sorted(correct.items())}


def epoch_curve_figure(task_name: str, outcome: FinetuneOutcome) -> matplotlib.figure.Figure:
    """Dev accuracy and train loss per epoch, best epoch marked."""
    epochs = np.arange(1, len(outcome.dev_accuracy) + 1)
    figure = matplotlib.figure.Figure(figsize=(6, 3.5))
    acc_axes = figure.add_subplot()
    acc_axes.plot(epochs, outcome.dev_accuracy, "o-", color="#4c72b0", label="dev accuracy")
    acc_axes.axvline(outcome.best_epoch, color="grey", linestyle="--", linewidth=1)
    acc_axes.set_xlabel("epoch")
    acc_axes.set_ylabel("dev accuracy")
    acc_axes.set_ylim(0, 1)
    loss_axes = acc_axes.twinx()
    loss_axes.plot(epochs, outcome.train_loss, "s-", color="#dd8452", label="train loss")
    loss_axes.set_ylabel("train loss")
    acc_axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    figure.legend(loc="lower right", fontsize="small")
    acc_axes.set_title(f"{task_name}: best epoch {outcome.best_epoch} ({outcome.best_accuracy:.4f})")
    figure.tight_layout()
    return figure


def run_finetune_task(
    loaded: LoadedModel, data_dir: str | pathlib.Path, task_name: str, options: FinetuneOptions
) -> TaskResult:
    """Reads the task, fine-tunes `loaded` on it with `options`, and reports dev accuracy."""
    task = clue.load_clue_task(data_dir, task_name, options.limit)
    outcome = finetune(loaded.model, loaded.params, task, loaded.tokenizer, options)
    details: dict[str, Any] = {
        "num_items": len(task.dev),
        "best_epoch": outcome.best_epoch,
        "dev_accuracy_per_epoch": outcome.dev_accuracy,
        "train_loss_per_epoch": outcome.train_loss,
        "num_train": len(task.train),
        "num_truncated": outcome.num_truncated,
        "num_dropped": task.dropped,
        "num_steps": outcome.num_steps,
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(options).items()},
    }
    if task_name == "diagnostic_nli":
        details["per_phenomenon"] = per_group_accuracy(task.dev, outcome.best_predictions)
    for split, count in outcome.num_truncated.items():
        if count:
            print(f"[finetune] {task_name}: truncated {count} {split} rows to {options.max_len} tokens", flush=True)
    return TaskResult(
        values={"accuracy": outcome.best_accuracy},
        details=details,
        figures={"epochs": epoch_curve_figure(task_name, outcome)},
    )


def run_task(spec: TaskSpec, loaded: LoadedModel, data_dir: pathlib.Path, settings: EvalSettings) -> TaskResult:
    """The registry's runner for the six fine-tuning tasks."""
    return run_finetune_task(loaded, data_dir, spec.name, settings.finetune[spec.name])
