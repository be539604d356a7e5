"""Fine-tuning track: the official classifier head on the pretrained body, one training loop.

The fine-tuned model is the pretrained `Transformer` (via `Transformer.encode`, all of its
parameters trained) plus `ClassifierHead`, the official pipeline's head
(evaluation_pipeline/finetune/classifier_model.py): LayerNorm without scale or bias ->
Linear -> GELU -> LayerNorm -> Dropout(0.1) -> Linear, PyTorch's initialisation, read at
an input row's first token (mlm/hybrid) or its last (causal). Classification and multiple
choice share the loop: an example has one input row, or one per option scored by the shared
head and compared by softmax.

Official protocol (its trainer.py, utils.py; the values: `FinetuneOptions`' defaults in
config/finetune_protocols.py, read as `finetune.*`): AdamW (b2 0.999, eps 1e-8, weight decay on every
parameter, no gradient clipping), the last partial batch of an epoch dropped, linear warmup
then cosine down to a share of the peak; score = dev accuracy at the best epoch.
Examples are packed whole into rows of max_len tokens with segment ids (`example_packing`):
a training step computes the batch's real tokens and little padding, and the dev split runs in
batches of one shape; rows are split over a data-parallel mesh of the local devices.
What a task prints about its time is `progress_clock`; its figure, `epoch_figure`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm.auto import tqdm

from babylm_jax.config.evaluation import EvalSettings, FinetuneOptions
from babylm_jax.config.model import ModelConfig
from babylm_jax.core.families import family_spec
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.eval.finetune import clue, example_packing as packing
from babylm_jax.eval.finetune.epoch_figure import epoch_curve_figure
from babylm_jax.eval.finetune.progress_clock import ProgressClock
from babylm_jax.eval.results import TaskResult
from babylm_jax.eval.loaded import LoadedModel, Params
from babylm_jax.model.transformer import Transformer
from babylm_jax.tasks.registry import TaskSpec

NEG_INF = -1e9  # score of a padded option slot
LAYER_NORM_EPS = 1e-5  # the official head's (its classifier_layer_norm_eps)


@dataclasses.dataclass(frozen=True)
class FinetuneOutcome:
    """What one fine-tuning run measured; epochs are numbered from 1."""

    dev_accuracy: list[float]  # per epoch
    train_loss: list[float]  # per epoch, mean over its steps
    best_epoch: int
    best_predictions: np.ndarray  # dev predictions at the best epoch, in example order
    num_truncated: dict[str, int]  # split -> rows cut to max_len
    num_steps: int
    tokens: dict[str, int]  # real and computed (row) tokens of the training and dev batches

    @property
    def best_accuracy(self) -> float:
        return self.dev_accuracy[self.best_epoch - 1]


def _torch_uniform(fan_in: int) -> Any:
    """PyTorch's nn.Linear initialisation (weights and biases): U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class ClassifierHead(nn.Module):
    """The official head: LayerNorm -> Dense(D) -> GELU -> LayerNorm -> Dropout -> Dense(num_outputs).

    As its PyTorch modules: the LayerNorms have no scale or bias (elementwise_affine=False, eps
    1e-5), GELU is exact, and both Dense layers start as nn.Linear does."""

    num_outputs: int
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, pooled_XxD: jax.Array, deterministic: bool = True) -> jax.Array:
        d = pooled_XxD.shape[-1]
        norm = functools.partial(nn.LayerNorm, epsilon=LAYER_NORM_EPS, use_scale=False, use_bias=False)
        dense = functools.partial(nn.Dense, kernel_init=_torch_uniform(d), bias_init=_torch_uniform(d))
        x = norm(name="norm_in")(pooled_XxD.astype(jnp.float32))
        x = nn.gelu(dense(d, name="dense")(x), approximate=False)
        x = norm(name="norm_out")(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        return dense(self.num_outputs, name="out")(x)


class FinetuneModel(nn.Module):
    """The pretrained body plus the classifier head; params {"body": ..., "head": ...}."""

    body_config: ModelConfig
    num_outputs: int
    multiple_choice: bool
    head_dropout: float = 0.1

    def setup(self) -> None:
        self.body = Transformer(self.body_config)
        self.head = ClassifierHead(self.num_outputs, self.head_dropout)

    def __call__(self, tokens_RxL: jax.Array, segments_RxL: jax.Array, positions_RxL: jax.Array,
                 pool_ExC: jax.Array, present_ExC: jax.Array, deterministic: bool = True) -> jax.Array:
        """Logits [E, K] per label (classification) or [E, C] per option (multiple choice) of packed rows.

        `pool_ExC` holds the flat index (row * L + position) of each input row's pooled token."""
        hidden_RxLxD, _ = self.body.encode(tokens_RxL, segments_RxL, positions_RxL, deterministic=deterministic)
        rows, length, d = hidden_RxLxD.shape
        pooled_ExCxD = jnp.take(hidden_RxLxD.reshape(rows * length, d), pool_ExC, axis=0)
        out_ExCxK = self.head(pooled_ExCxD, deterministic)
        if not self.multiple_choice:
            return out_ExCxK[:, 0]
        return jnp.where(present_ExC, out_ExCxK[..., 0], NEG_INF)


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """The static part of the optimizer; the learning rate is passed per step."""

    weight_decay: float
    max_grad_norm: float  # 0 = no clipping (the official trainer clips nothing)


def learning_rates(options: FinetuneOptions, num_steps: int) -> np.ndarray:
    """The learning rate of every step, as the official cosine_schedule_with_warmup (a LambdaLR stepped
    after each update): linear from 0 over int(warmup_ratio x steps), then cosine down to
    `min_lr_ratio` x the peak."""
    warmup = int(options.warmup_ratio * num_steps)
    step = np.arange(num_steps, dtype=np.float64)
    progress = (step - warmup) / max(1, num_steps - warmup)
    floor = options.min_lr_ratio
    cosine = np.maximum(floor, floor + (1 - floor) * 0.5 * (1.0 + np.cos(np.pi * progress)))
    factor = np.where(step < warmup, step / max(1, warmup), cosine)
    return (options.learning_rate * factor).astype(np.float32)


def finetune_optimizer(settings: StepSettings) -> optax.GradientTransformation:
    """AdamW (b2 0.999, eps 1e-8) without the learning rate, weight decay on every parameter (torch.optim.AdamW
    over model.parameters()); clipping only when max_grad_norm > 0. Updates are scaled by -lr in `finetune_step`."""
    clip = [optax.clip_by_global_norm(settings.max_grad_norm)] if settings.max_grad_norm > 0 else []
    return optax.chain(*clip, optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8),
                       optax.add_decayed_weights(settings.weight_decay))


def data_mesh(devices: list | None = None) -> Mesh:
    """A 1-D `data` mesh over the local devices; packed rows are split over it."""
    return Mesh(np.asarray(list(jax.local_devices() if devices is None else devices)), ("data",))


ROW_KEYS = ("tokens", "segments", "positions")  # [R, L]: split over the mesh
SLOT_KEYS = ("pool", "present", "labels", "index")  # [E, ...]: on every device


def _device_batch(batch: packing.Batch, rows: NamedSharding, slots: NamedSharding) -> dict[str, jax.Array]:
    return {**{k: jax.device_put(batch[k], rows) for k in ROW_KEYS},
            **{k: jax.device_put(batch[k], slots) for k in SLOT_KEYS}}


@dataclasses.dataclass(frozen=True)
class _PackShape:
    """How one task's examples are packed: row length, row multiples, evaluation batch shape, shardings."""

    options: FinetuneOptions
    num_choices: int
    last: bool  # pool the last token of each input row (causal), else the first
    rows_multiple: int
    eval_rows: int
    eval_slots: int
    rows: NamedSharding
    slots: NamedSharding

    @classmethod
    def of(cls, options: FinetuneOptions, train: clue.EncodedSplit, dev: clue.EncodedSplit, last: bool,
           mesh: Mesh) -> "_PackShape":
        num_choices = max(len(rows) for rows in train.ids + dev.ids)
        eval_rows = math.ceil(max(options.eval_rows, num_choices) / mesh.size) * mesh.size
        shortest = min(sum(len(r) for r in rows) for rows in dev.ids)
        eval_slots = min(len(dev.ids), eval_rows * max(1, options.max_len // shortest))
        return cls(options, num_choices, last, math.lcm(options.rows_multiple, mesh.size), eval_rows, eval_slots,
                   NamedSharding(mesh, P("data")), NamedSharding(mesh, P()))

    def eval_batches(self, split: clue.EncodedSplit) -> list[packing.Batch]:
        return packing.eval_batches(split, self.options.max_len, self.eval_rows, self.eval_slots, self.num_choices,
                                    self.last)

    def device(self, batch: packing.Batch) -> dict[str, jax.Array]:
        return _device_batch(batch, self.rows, self.slots)


def _logits(model: FinetuneModel, params: dict, batch: dict, **kwargs: Any) -> jax.Array:
    inputs = (batch[k] for k in ("tokens", "segments", "positions", "pool", "present"))
    return model.apply({"params": params}, *inputs, **kwargs)


def _loss(model: FinetuneModel, params: dict, batch: dict, dropout_key: jax.Array) -> jax.Array:
    """Mean cross-entropy over real examples (empty slots, index -1, get no weight)."""
    logits_ExK = _logits(model, params, batch, deterministic=False, rngs={"dropout": dropout_key})
    weights_E = (batch["index"] >= 0).astype(jnp.float32)
    losses_E = optax.softmax_cross_entropy_with_integer_labels(logits_ExK, batch["labels"])
    return jnp.sum(losses_E * weights_E) / jnp.maximum(jnp.sum(weights_E), 1.0)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2,))
def finetune_step(
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
    updates, opt_state = finetune_optimizer(settings).update(grads, opt_state, params)
    params = jax.tree.map(lambda p, u: p - learning_rate * u, params, updates)
    return (params, opt_state), loss


@functools.partial(jax.jit, static_argnums=(0,))
def predict_step(model: FinetuneModel, params: dict, batch: dict) -> jax.Array:
    """Predicted label (or option) per example slot [E]."""
    return jnp.argmax(_logits(model, params, batch), axis=-1)


def _compile_all(model: FinetuneModel, settings: StepSettings, state: Any, shape: _PackShape,
                 plan: packing.TrainPlan, dev_batch: dict, dropout_key: jax.Array) -> tuple[list[int], float]:
    """Compiles the train step for every row count of `plan` and the prediction step, before step 1;
    (the row counts, seconds)."""
    start = time.perf_counter()
    for rows in plan.shapes:
        batch = {key: jax.ShapeDtypeStruct((rows, plan.row_len), jnp.int32, sharding=shape.rows) for key in ROW_KEYS}
        batch |= {key: jax.ShapeDtypeStruct((plan.batch_size, *dev_batch[key].shape[1:]), dev_batch[key].dtype,
                                            sharding=shape.slots) for key in SLOT_KEYS}
        finetune_step.lower(model, settings, state, batch, dropout_key, np.int32(0), np.float32(0)).compile()
    predict_step.lower(model, state[0], dev_batch).compile()
    return plan.shapes, time.perf_counter() - start


def finetune(
    body_model: Transformer,
    body_params: Params,
    task: clue.ClueTask,
    tokenizer: Tokenizer,
    options: FinetuneOptions,
) -> FinetuneOutcome:
    """Fine-tunes body + a fresh head on `task.train`; dev accuracy after every epoch."""
    config = body_model.config
    if options.max_len > config.max_len:
        raise ValueError(f"config key finetune.max_len={options.max_len} is longer than the model's "
                         f"max_len={config.max_len}; set it to at most {config.max_len}")
    train = clue.encode_split(task.train, tokenizer, config.family, options.max_len)
    dev = clue.encode_split(task.dev, tokenizer, config.family, options.max_len)
    shape = _PackShape.of(options, train, dev, family_spec(config.family).causal, data_mesh())
    model = FinetuneModel(config, task.num_outputs, task.kind == "multiple_choice", options.head_dropout)
    key = jax.random.PRNGKey(options.seed)
    plan = packing.TrainPlan(train, options.batch_size, options.max_len, shape.rows_multiple, options.seed,
                             options.epochs)
    num_steps = sum(len(steps) for steps in plan.members)
    learning_rate = learning_rates(options, num_steps)
    settings = StepSettings(options.weight_decay, options.max_grad_norm)
    params = _initial_params(body_params, task.num_outputs, config.d_model, jax.random.fold_in(key, 0))
    state = jax.device_put((params, finetune_optimizer(settings).init(params)), shape.slots)
    dropout_key = jax.random.fold_in(key, 1)
    dev_packed = shape.eval_batches(dev)
    dev_batches = [shape.device(b) for b in dev_packed]
    clock = ProgressClock(task.name, num_steps, options.progress)
    clock.plan(options, len(train.ids), len(dev.ids))
    clock.compiled(*_compile_all(model, settings, state, shape, plan, dev_batches[0], dropout_key))
    dev_labels = np.asarray(dev.labels)
    dev_accuracy, train_loss, best_predictions, tokens, step = [], [], None, {}, 0
    with tqdm(total=num_steps, desc=f"finetune {task.name}", unit="step", disable=not options.progress) as bar:
        for epoch in range(options.epochs):
            losses = []
            for batch in plan.batches(epoch, shape.num_choices, shape.last):
                _count_tokens(tokens, "train", batch)
                state, loss = finetune_step(model, settings, state, shape.device(batch), dropout_key, np.int32(step),
                                            learning_rate[step])
                losses.append(loss)
                step += 1
                clock.after_step(step, loss)
                bar.update()
            started = time.perf_counter()
            predicted = _dev_predictions(model, state[0], dev_batches, len(dev_labels),
                                         f"{task.name} dev, epoch {epoch + 1}", options.progress)
            if epoch == 0:
                clock.evaluated(time.perf_counter() - started, options.epochs)
            accuracy = float(np.mean(predicted == dev_labels))
            train_loss.append(float(np.mean(jax.device_get(losses))))
            if not dev_accuracy or accuracy > max(dev_accuracy):
                best_predictions = predicted
            dev_accuracy.append(accuracy)
            bar.set_postfix(epoch=epoch + 1, loss=f"{train_loss[-1]:.4f}", dev_acc=f"{accuracy:.4f}")
    _count_tokens(tokens, "dev", *dev_packed)
    return FinetuneOutcome(dev_accuracy=dev_accuracy, train_loss=train_loss, best_epoch=int(np.argmax(dev_accuracy)) + 1,
                           best_predictions=best_predictions, num_steps=num_steps, tokens=tokens,
                           num_truncated={"train": train.num_truncated, "dev": dev.num_truncated})


def _initial_params(body_params: Params, num_outputs: int, d_model: int, key: jax.Array) -> Params:
    """The pretrained body and a fresh head, as a float32 copy (finetune_step donates it)."""
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


def _count_tokens(tokens: dict[str, int], split: str, *batches: packing.Batch) -> None:
    real, rows = packing.padded_tokens(list(batches))
    tokens[f"{split}_real"] = tokens.get(f"{split}_real", 0) + real
    tokens[f"{split}_rows"] = tokens.get(f"{split}_rows", 0) + rows


def per_group_accuracy(examples: list[clue.Example], predictions: np.ndarray) -> dict[str, float]:
    """Accuracy per `Example.group` (diagnostic_nli phenomena)."""
    correct: dict[str, list[bool]] = {}
    for example, predicted in zip(examples, predictions):
        correct.setdefault(example.group, []).append(bool(predicted == example.label))
    return {group: float(np.mean(hits)) for group, hits in sorted(correct.items())}


def run_finetune(spec: TaskSpec, loaded: LoadedModel, data_dir: pathlib.Path, settings: EvalSettings) -> TaskResult:
    """The registry's runner for the fine-tuning tasks: reads the task through its entry, fine-tunes `loaded` on it
    with the task's options, and reports dev accuracy (and accuracy per group when its rows name one)."""
    options, task_name = settings.finetune[spec.name], spec.name
    task = clue.load_clue_task(data_dir, task_name, options.limit, options.train_examples or None)
    for split, count in task.dropped.items():
        if count and options.progress:
            print(f"[finetune] {task_name}: dropped {count:,} unlabelled {split} rows, as the official preparation does",
                  flush=True)
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
        "tokens": outcome.tokens,
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(options).items()},
    }
    if spec.finetune.fields.group:
        details[f"per_{spec.finetune.fields.group}"] = per_group_accuracy(task.dev, outcome.best_predictions)
    for split, count in outcome.num_truncated.items():
        if count:
            print(f"[finetune] {task_name}: truncated {count} {split} rows to {options.max_len} tokens", flush=True)
    return TaskResult(
        values={"accuracy": outcome.best_accuracy},
        details=details,
        figures={"epochs": epoch_curve_figure(task_name, outcome.dev_accuracy, outcome.train_loss, outcome.best_epoch)},
    )
