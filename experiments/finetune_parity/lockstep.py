"""The official fine-tuning trainer and babylm_jax's in lockstep: one start, one order, step by step.

    python experiments/finetune_parity/lockstep.py --workdir runs/base --export runs/base/hf \
        --official /path/to/chinese-babylm-eval-pipeline --data DATA --task tnews [--epochs 2] \
        [--seed 42] [--out OUT.json]

Seed noise aside, do the two trainers compute the same thing? Both sides start from the same
exported model and the SAME head weights (the official head as its constructor draws them,
copied into ours), take the SAME batches in the same order (babylm_jax's `TrainPlan`, fed to the
official `Trainer` through a fixed batch sampler) and run with no dropout (the only random draw
left inside a step). Everything else is each side's own code: the official `Trainer.train_epoch`
and `Trainer.evaluate` run unmodified (its tokenizer, collate, head, AdamW, scheduler, EMA copy,
right-padded final-token pooling), babylm_jax's packed `finetune_step` and `predict_step` likewise.

Compared: the token ids of every example (ours against the official tokenizer's), the learning rate
and the loss at every step, and after each epoch the dev accuracy and how many dev predictions
agree. Float32 on both sides, so the losses agree to rounding, not bit for bit; a systematic
difference (framing, pooling, head, optimizer, schedule) shows up as a drift from the first steps.

DATA is the folder of make_data.py (the official layout). Runs in babylm_jax's environment with
torch and transformers installed (`pip install -e ".[export]"`); the official code is imported
from --official, nothing of it is kept here.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time
from types import SimpleNamespace
from typing import Any

import jax
import numpy as np

from babylm_jax.eval.finetune import classifier, clue, example_packing as packing
from babylm_jax.config.evaluation import default_settings
from babylm_jax.training.checkpoints import load_for_eval

OFFICIAL_LABELS = {"afqmc": 2, "ocnli": 3, "tnews": 15, "cluewsc2020": 2}  # its pipeline.FINETUNE_SPECS


class _FixedOrder:
    """A torch batch sampler yielding the given batches of example indices, epoch after epoch."""

    def __init__(self, epochs: list[list[list[int]]]):
        self.epochs, self.epoch = epochs, 0

    def __iter__(self):
        batches = self.epochs[self.epoch]
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        return len(self.epochs[0])


def _official_trainer(args: argparse.Namespace, train_file: pathlib.Path, valid_file: pathlib.Path) -> Any:
    """The official Trainer on the export: its own model, head, tokenizer, optimizer and scheduler; no dropout."""
    sys.path.insert(0, str(args.official))
    import torch
    from evaluation_pipeline.finetune.trainer import Trainer
    from evaluation_pipeline.finetune.utils import seed_everything

    seed_everything(args.seed)
    options = SimpleNamespace(
        model_name_or_path=str(args.export), revision_name=None, enc_dec=False, causal=True, take_final=True,
        train_data=train_file, valid_data=valid_file, predict_data=None, task=args.task,
        num_labels=OFFICIAL_LABELS[args.task], metrics=["accuracy"], metric_for_valid="accuracy",
        higher_is_better=True, keep_best_model=True, seed=args.seed, ema_decay=0.0, verbose=False, save=False,
        batch_size=32, gradient_accumulation=1, valid_batch_size=64, learning_rate=3e-5, sequence_length=128,
        num_epochs=args.epochs, classifier_dropout=0.0, classifier_layer_norm_eps=1e-5, weight_decay=0.01,
        warmup_proportion=0.06, min_factor=0.1, scheduler="cosine", optimizer="adamw", beta1=0.9, beta2=0.999,
        optimizer_eps=1e-8, padding_side="right", amsgrad=False, wandb=False)
    return Trainer(options, torch.device("cpu")), torch


def _head_from_official(trainer: Any) -> dict:
    """The official head's two Linear layers as our head's Dense params (kernel = weight transposed)."""
    linears = [m for m in trainer.model.classifier.nonlinearity if m.__class__.__name__ == "Linear"]
    as_dense = lambda m: {"kernel": m.weight.detach().numpy().T.copy(), "bias": m.bias.detach().numpy().copy()}
    return {"dense": as_dense(linears[0]), "out": as_dense(linears[1])}


def _token_agreement(trainer: Any, encoded: clue.EncodedSplit, texts: list) -> int:
    """Examples whose ids under the official tokenizer (its collate's call, one at a time) equal ours."""
    same = 0
    for text, ours in zip(texts, encoded.ids):
        theirs = trainer.tokenizer([text], truncation=True, max_length=128)["input_ids"][0]
        same += list(theirs) == list(ours[0])
    return same


def run(args: argparse.Namespace) -> dict[str, Any]:
    clue_dir = args.data / "full_eval" / "clue"
    train_file, valid_file = clue_dir / f"{args.task}.train.jsonl", clue_dir / f"{args.task}.valid.jsonl"
    loaded = load_for_eval(str(args.workdir))
    task = clue.load_clue_task(args.data, args.task)
    options = dataclasses.replace(default_settings().finetune[args.task], epochs=args.epochs, seed=args.seed,
                                  head_dropout=0.0, train_examples=0, progress=False)
    config = loaded.model.config
    train = clue.encode_split(task.train, loaded.tokenizer, config.family, options.max_len)
    dev = clue.encode_split(task.dev, loaded.tokenizer, config.family, options.max_len)
    shape = classifier._PackShape.of(options, train, dev, True, classifier.data_mesh())
    plan = packing.TrainPlan(train, options.batch_size, options.max_len, shape.rows_multiple, options.seed,
                             options.epochs)

    trainer, torch = _official_trainer(args, train_file, valid_file)
    dataset = trainer.train_dataloader.dataset
    trainer.train_dataloader = torch.utils.data.DataLoader(
        dataset, batch_sampler=_FixedOrder(plan.members), collate_fn=trainer.train_dataloader.collate_fn)
    official_losses, official_predicted = [], []
    official_lrs = [trainer.scheduler.get_last_lr()[0]]  # step k's learning rate: official_lrs[k]

    def record_step(logits: Any, labels: Any) -> None:  # once per step, after the update and the scheduler
        official_losses.append(float(torch.nn.functional.cross_entropy(logits, labels)))
        official_lrs.append(trainer.scheduler.get_last_lr()[0])

    def record_dev(logits: Any, labels: Any) -> None:  # once per evaluation, all dev logits
        official_predicted.append(logits.argmax(-1).numpy())

    model = classifier.FinetuneModel(config, task.num_outputs, False, 0.0)
    params = classifier._initial_params(loaded.params, task.num_outputs, config.d_model, jax.random.PRNGKey(0))
    params["head"] = jax.tree.map(np.asarray, _head_from_official(trainer))
    num_steps = sum(len(steps) for steps in plan.members)
    learning_rate = classifier.learning_rates(options, num_steps)
    settings = classifier.StepSettings(options.weight_decay, options.max_grad_norm)
    state = jax.device_put((params, classifier.finetune_optimizer(settings).init(params)), shape.slots)
    dev_batches = [shape.device(b) for b in shape.eval_batches(dev)]
    key = jax.random.PRNGKey(0)

    report: dict[str, Any] = {
        "task": args.task, "seed": args.seed, "epochs": args.epochs, "num_train": len(train.ids),
        "num_dev": len(dev.ids), "num_steps": num_steps,
        "train_ids_identical": _token_agreement(trainer, train, dataset.texts),
        "dev_ids_identical": _token_agreement(trainer, dev, trainer.valid_dataloader.dataset.texts),
        "epochs_compared": []}
    dev_labels = np.asarray(dev.labels)
    our_losses, step = [], 0
    for epoch in range(args.epochs):
        started = time.perf_counter()
        _with_metrics_hook(trainer, record_step, trainer.train_epoch)
        official_seconds = time.perf_counter() - started
        official_accuracy = _with_metrics_hook(trainer, record_dev, trainer.evaluate)["accuracy"]
        started = time.perf_counter()
        for batch in plan.batches(epoch, shape.num_choices, shape.last):
            state, loss = classifier.finetune_step(model, settings, state, shape.device(batch), key, np.int32(step),
                                                   learning_rate[step])
            our_losses.append(float(loss))
            step += 1
        our_seconds = time.perf_counter() - started
        ours_predicted = classifier._dev_predictions(model, state[0], dev_batches, len(dev_labels), "", False)
        report["epochs_compared"].append({
            "epoch": epoch + 1, "official_accuracy": float(official_accuracy),
            "ours_accuracy": float(np.mean(ours_predicted == dev_labels)),
            "predictions_agree": float(np.mean(ours_predicted == official_predicted[-1])),
            "official_train_seconds": official_seconds, "ours_train_seconds": our_seconds})
        print(json.dumps(report["epochs_compared"][-1]), flush=True)
    losses = np.asarray([official_losses, our_losses])
    report |= {
        "loss_official": official_losses, "loss_ours": our_losses,
        "loss_max_abs_diff": float(np.max(np.abs(losses[0] - losses[1]))),
        "loss_max_rel_diff": float(np.max(np.abs(losses[0] - losses[1]) / np.abs(losses[0]))),
        "lr_max_abs_diff": float(np.max(np.abs(np.asarray(official_lrs[:-1]) - learning_rate))),
    }
    return report


def _with_metrics_hook(trainer: Any, hook: Any, call: Any) -> Any:
    """`call()` (the Trainer's own train_epoch or evaluate, as they are) with `hook(logits, labels)` run
    at each of its `calculate_metrics` calls: once per training step, once per evaluation."""
    original = trainer.calculate_metrics

    def hooked(logits: Any, labels: Any, metrics: list[str]) -> dict:
        hook(logits.detach(), labels)
        return original(logits, labels, metrics)
    trainer.calculate_metrics = hooked
    try:
        return call()
    finally:
        trainer.calculate_metrics = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--export", type=pathlib.Path, required=True)
    parser.add_argument("--official", type=pathlib.Path, required=True)
    parser.add_argument("--data", type=pathlib.Path, required=True)
    parser.add_argument("--task", choices=sorted(OFFICIAL_LABELS), required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    report = run(args)
    summary = {k: v for k, v in report.items() if not k.startswith("loss_") or k.endswith("diff")}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
