"""The pretraining loop: sharded init, jitted train step, eval loss, checkpoints, metrics.

    summary = train_and_evaluate(config, workdir)

Running it again on the same workdir resumes from the latest checkpoint (state and data
iterator) and continues the identical trajectory.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.experimental import multihost_utils
from tqdm import tqdm

from babylm_jax.data.config import DataConfig
from babylm_jax.data.pipeline import build_train_data
from babylm_jax.data.prepare import prepare_corpus
from babylm_jax.model import objectives
from babylm_jax.model.transformer import Transformer, count_params
from babylm_jax.training import metrics as metrics_lib
from babylm_jax.training import optim, sharding
from babylm_jax.atomic import atomic_write_json
from babylm_jax.training.checkpoint import Checkpointer, check_config, write_config
from babylm_jax.training.state import TrainState, build_model, sharded_init
from babylm_jax.workdir import workdir_lock


def word_milestones(unit: float) -> Iterator[float]:
    """1, 2, ..., 10, 20, ..., 100, then every 100 units (BabyLM learning-dynamics checkpoints)."""
    yield from (unit * k for k in range(1, 10))
    yield from (unit * 10 * k for k in range(1, 10))
    k = 1
    while True:
        yield unit * 100 * k
        k += 1


def seq_len_at(config: ml_collections.ConfigDict, step: int) -> int:
    """Sequence length of the curriculum phase containing `step` (default: train.seq_len)."""
    length = config.train.seq_len
    for start_share, phase_len in config.train.seq_len_curriculum:
        if step >= start_share * config.train.num_steps:
            length = phase_len
    return length


def mask_rate_at(train: ml_collections.ConfigDict, step: jax.Array) -> jax.Array:
    """Masking rate, linear from train.mask_rate to train.mask_rate_final over the run."""
    frac = jnp.clip(step / max(1, train.num_steps - 1), 0.0, 1.0)
    return train.mask_rate + (train.mask_rate_final - train.mask_rate) * frac


def reshape_rows(batch: dict, length: int) -> dict:
    """Splits [B, L] rows into [B * L/length, length] rows (sequence-length curriculum)."""
    out = {}
    for k, v in batch.items():
        if v.ndim == 2 and v.shape[1] != length:
            out[k] = v.reshape(-1, length)
        else:
            out[k] = v
    return out


def make_masking(config: ml_collections.ConfigDict, tokenizer: Any) -> objectives.MaskingConfig:
    return objectives.MaskingConfig(
        mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size,
        special_ids=tuple(tokenizer.special_ids),
        whole_word=bool(config.data.whole_word_masking),
    )


def make_train_step(config: ml_collections.ConfigDict, model: Transformer, optimizer, masking, length: int):
    """A pure (state, batch, rng) -> (state, metrics) step with gradient accumulation."""
    train = config.train
    schedule = optim.make_schedule(train)
    accum = train.grad_accum_steps
    deterministic = config.model.dropout == 0.0

    def loss_fn(params, micro, rng, step):
        rows = micro["tokens"].shape[0]
        return objectives.compute_loss(
            model, params, micro, rng,
            mask_rate=mask_rate_at(train, step), max_mask_rate=max(train.mask_rate, train.mask_rate_final),
            masking=masking, causal_rows=int(round(rows * train.hybrid_causal_share)), z_loss=train.z_loss,
            deterministic=deterministic,
        )

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step_fn(state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict]:
        batch = reshape_rows({k: v for k, v in batch.items() if k != "words"}, length)
        rng = jax.random.fold_in(rng, state.step)
        # Micro-batch i takes rows i, i+accum, ...: every device keeps a share of each one.
        micro_batches = jax.tree.map(lambda x: jnp.swapaxes(x.reshape(-1, accum, *x.shape[1:]), 0, 1), batch)

        def accumulate(carry, xs):
            grads_sum, loss_sum = carry
            micro, i = xs
            (loss, aux), grads = grad_fn(state.params, micro, jax.random.fold_in(rng, i), state.step)
            return (jax.tree.map(jnp.add, grads_sum, grads), loss_sum + loss), aux["predicted_tokens"]

        zeros = jax.tree.map(jnp.zeros_like, state.params)
        (grads, loss_sum), predicted = jax.lax.scan(accumulate, (zeros, 0.0), (micro_batches, jnp.arange(accum)))
        grads = jax.tree.map(lambda g: g / accum, grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = state.ema_params
        if ema is not None:
            d = train.ema_decay
            ema = jax.tree.map(lambda e, p: d * e + (1.0 - d) * p, ema, params)
        new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state, ema_params=ema)
        return new_state, {
            "loss": loss_sum / accum,
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": schedule(state.step),
            "predicted_tokens": jnp.sum(predicted),
        }

    return step_fn


def make_eval_step(config: ml_collections.ConfigDict, model: Transformer, masking):
    """(params, batch) -> (summed loss, predicted tokens) with fixed masking randomness."""

    def eval_step(params, batch):
        rows = batch["tokens"].shape[0]
        loss, aux = objectives.compute_loss(
            model, params, batch, jax.random.key(12345),
            mask_rate=config.train.mask_rate_final, masking=masking,
            causal_rows=int(round(rows * config.train.hybrid_causal_share)),
        )
        return loss * aux["predicted_tokens"], aux["predicted_tokens"]

    return eval_step


def _maybe_initialize_distributed(config: ml_collections.ConfigDict) -> None:
    dist = config.get("distributed")
    if dist is None or not dist.initialize:
        return
    kwargs = {}
    if dist.coordinator_address:
        kwargs = dict(
            coordinator_address=dist.coordinator_address,
            num_processes=dist.num_processes,
            process_id=dist.process_id,
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU-only runs; ignored elsewhere
    jax.distributed.initialize(**kwargs)


def _global_words(local_words: float) -> float:
    if jax.process_count() == 1:
        return local_words
    return float(np.sum(multihost_utils.process_allgather(np.asarray(local_words, np.float64))))


def evaluate_loss(eval_step, params, eval_batches: list[dict], mesh) -> float:
    """Token-weighted mean loss over the fixed held-out batches."""
    total, count = 0.0, 0.0
    for batch in eval_batches:
        batch = sharding.global_batch({k: v for k, v in batch.items() if k != "words"}, mesh)
        loss_sum, n = eval_step(params, batch)
        total, count = total + float(loss_sum), count + float(n)
    return total / max(count, 1.0)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, stop_at_step: int | None = None) -> dict:
    """Trains (or resumes) the run in `workdir`; returns the end-of-run summary.

    `stop_at_step` ends this invocation early (after a checkpoint at that step) without
    changing the schedule, as a preempted job would; running again resumes there.
    """
    _maybe_initialize_distributed(config)
    workdir = os.path.abspath(workdir)
    model, mesh, optimizer = _checked_setup(config)  # config errors before the workdir is touched
    # One run per workdir; in multi-process runs all processes share it and process 0 holds the lock.
    with workdir_lock(workdir, "train") if jax.process_index() == 0 else contextlib.nullcontext():
        return _train(config, workdir, model, mesh, optimizer, stop_at_step)


def _checked_setup(config: ml_collections.ConfigDict) -> tuple[Transformer, Any, optax.GradientTransformation]:
    """The model, mesh and optimizer of `config`, every model, train, mesh and data key checked."""
    model = build_model(config)  # validates model keys and seq_len before any work
    devices = sharding.run_devices(config.mesh, jax.devices()) if jax.process_count() == 1 else None
    mesh = sharding.make_mesh(config.mesh, devices)
    sharding.check_batch_size(config.train.batch_size, mesh)
    if config.train.batch_size % (jax.process_count() * config.train.grad_accum_steps):
        raise ValueError(
            f"config key train.batch_size={config.train.batch_size} must divide evenly over "
            f"{jax.process_count()} processes x train.grad_accum_steps={config.train.grad_accum_steps}"
        )
    optimizer = optim.make_optimizer(config.train)  # validates the train keys before any data work
    DataConfig.from_config(config.data)  # and the data keys
    return model, mesh, optimizer


def _train(config: ml_collections.ConfigDict, workdir: str, model: Transformer, mesh: Any,
           optimizer: optax.GradientTransformation, stop_at_step: int | None) -> dict:
    is_main = jax.process_index() == 0
    if is_main:
        check_config(workdir, config)  # config.json itself is written once the run has restored or started

    if jax.process_count() > 1:  # one process prepares the data; the others then find it cached
        if is_main:
            prepare_corpus(config, workdir)
        multihost_utils.sync_global_devices("babylm_jax: data prepared")
    data = build_train_data(config, workdir, process_index=jax.process_index(), process_count=jax.process_count())
    if data.tokenizer.vocab_size > config.model.vocab_size:
        raise ValueError(
            f"config key model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's "
            f"{data.tokenizer.vocab_size} ids"
        )
    masking = make_masking(config, data.tokenizer)

    init_unboxed, state_shardings, target = sharded_init(config, model, optimizer, mesh)
    root_rng = jax.random.key(config.train.seed)

    checkpointer = Checkpointer(workdir, config.checkpoint.max_to_keep)
    start_step, tokens_seen, words_seen = 0, 0, 0.0
    restored = checkpointer.restore_latest(target, data.train_iterator, move_damaged=jax.process_count() == 1)
    if restored is not None:
        latest, state, meta = restored
        start_step, tokens_seen, words_seen = latest, int(meta["tokens_seen"]), float(meta["words_seen"])
        if is_main:
            print(f"Resuming {workdir} from step {latest} ({tokens_seen:,} tokens, {words_seen:,.0f} words seen)")
    else:
        state = init_unboxed(jax.random.fold_in(root_rng, 0))
    if is_main:
        write_config(workdir, config)
        metrics_lib.trim_metrics(workdir, start_step)

    num_steps = config.train.num_steps
    last_step = num_steps if stop_at_step is None else min(stop_at_step, num_steps)
    if start_step >= last_step:
        checkpointer.close()
        if is_main:
            print(f"{workdir} is already at step {start_step}; nothing to train (to go on, raise train.num_steps "
                  "with train.allow_schedule_change=True)")
        return {"steps": start_step, "tokens_seen": tokens_seen, "words_seen": words_seen}

    num_params = count_params(state.params)
    c = model.config
    causal_share = metrics_lib.causal_share(config)
    peak_flops, peak_source = metrics_lib.device_peak_flops()
    milestones = (m for m in word_milestones(config.checkpoint.milestone_unit) if m > words_seen)
    next_milestone = next(milestones) if config.checkpoint.word_milestones else math.inf
    step_rng = jax.random.fold_in(root_rng, 1)
    batch_sharding = sharding.batch_sharding(mesh)
    step_fns: dict[int, Any] = {}

    def compiled_step(length: int):
        if length not in step_fns:
            step_fns[length] = jax.jit(
                make_train_step(config, model, optimizer, masking, length),
                in_shardings=(state_shardings, batch_sharding, None),
                out_shardings=(state_shardings, sharding.replicated(mesh)),
                donate_argnums=(0,),
            )
        return step_fns[length]

    eval_step = jax.jit(make_eval_step(config, model, masking))
    writer = metrics_lib.MetricsWriter(workdir, enabled=is_main)

    config_json = json.loads(config.to_json_best_effort())

    def save(step: int, milestone: bool = False) -> None:
        nonlocal pending
        if pending is not None:  # log the step first: each step in metrics.jsonl once, and no NaN state saved
            record(*jax.device_get(pending))
            pending = None
        meta = {"step": step, "tokens_seen": tokens_seen, "words_seen": words_seen, "config": config_json}
        checkpointer.save(step, state, data.train_iterator, meta, milestone=milestone)

    eval_batches = data.eval_batches[: config.train.eval_batches]
    tokens_per_step = config.train.batch_size * config.train.seq_len
    pending: tuple[int, dict, float] | None = None  # (step, metrics on device, words seen)
    history: list[dict] = []
    last_eval = math.nan
    window_start, window_tokens = time.perf_counter(), 0
    run_start = time.perf_counter()
    progress = tqdm(total=num_steps, initial=start_step, desc="train", disable=not is_main, dynamic_ncols=True)

    def record(step: int, fetched: dict, words: float) -> None:
        """Logs one step's metrics (fetched a step late so the host never stalls the device)."""
        nonlocal window_start, window_tokens
        window_tokens += tokens_per_step
        loss = float(fetched["loss"])
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at step {step}; lower train.learning_rate or check the data")
        if step % config.train.log_every_steps and step != last_step:
            return
        elapsed = time.perf_counter() - window_start
        tokens_per_s = window_tokens / elapsed if elapsed > 0 else 0.0
        flops = tokens_per_s * metrics_lib.train_flops_per_token(c, seq_len_at(config, step - 1), causal_share)
        entry = {
            "step": step, "loss": loss, "grad_norm": float(fetched["grad_norm"]),
            "learning_rate": float(fetched["learning_rate"]), "tokens_per_s": tokens_per_s,
            "mfu": flops / peak_flops, "tokens_seen": step * tokens_per_step, "words_seen": words,
        }
        history.append(entry)
        writer.write(entry)
        progress.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
        window_start, window_tokens = time.perf_counter(), 0

    for step in range(start_step + 1, last_step + 1):
        local = next(data.train_iterator)
        words_seen += _global_words(float(np.sum(local["words"])))
        tokens_seen += tokens_per_step
        batch = sharding.global_batch(local, mesh)
        state, step_metrics = compiled_step(seq_len_at(config, step - 1))(state, batch, step_rng)
        if pending is not None:
            record(*pending)
        pending = (step, step_metrics, words_seen)
        progress.update(1)
        if step % config.train.eval_every_steps == 0 or step == last_step:
            record(*jax.device_get(pending))
            pending = None
            eval_params = state.ema_params if state.ema_params is not None else state.params
            last_eval = evaluate_loss(eval_step, eval_params, eval_batches, mesh)
            writer.write({"step": step, "eval_loss": last_eval, "words_seen": words_seen})
            progress.write(f"step {step}: eval_loss {last_eval:.4f}")
            window_start = time.perf_counter()
        if words_seen >= next_milestone:
            save(step, milestone=True)
            progress.write(f"step {step}: word milestone {next_milestone:,.0f} (words seen {words_seen:,.0f})")
            while next_milestone <= words_seen:
                next_milestone = next(milestones)
        if step % config.checkpoint.every_steps == 0 or step == last_step:
            save(step)
    if pending is not None:
        record(*jax.device_get(pending))
    progress.close()
    checkpointer.wait()
    checkpointer.close()

    wall = time.perf_counter() - run_start
    steps_run = last_step - start_step
    timed = [h for h in history if h["tokens_per_s"] > 0]
    summary = {
        "parameters": num_params,
        "steps": last_step,
        "tokens_seen": tokens_seen,
        "words_seen": words_seen,
        "final_train_loss": history[-1]["loss"] if history else math.nan,
        "final_eval_loss": last_eval,
        "wall_time_s": wall,
        "mean_tokens_per_s": steps_run * tokens_per_step / wall if steps_run else 0.0,
        "mean_mfu": float(np.mean([h["mfu"] for h in timed])) if timed else 0.0,
        "mfu_peak_source": peak_source,
    }
    if is_main:
        atomic_write_json(os.path.join(workdir, "summary.json"), summary)
        metrics_lib.plot_learning_curves(workdir)
        print(format_summary(summary))
        print(format_outputs(workdir))
    return summary


RUN_OUTPUTS = (  # (path in the workdir, what it holds), listed at the end of a run when present
    ("checkpoints", "checkpoints (params, optimizer, data iterator)"),
    ("milestones", "word-milestone checkpoints"),
    ("metrics.jsonl", "training and eval metrics, one JSON line per log step"),
    ("learning_curves.png", "loss and throughput curves"),
    ("summary.json", "this summary"),
    ("budget.json", "jieba word counts against the budget"),
    ("tokenizer", "the tokenizer"),
    ("config.json", "the resolved config"),
)


def format_outputs(workdir: str) -> str:
    """Where the run's outputs are, and the commands that take them further."""
    rows = [(os.path.join(workdir, name), what) for name, what in RUN_OUTPUTS if os.path.exists(os.path.join(workdir, name))]
    width = max((len(path) for path, _ in rows), default=0)
    return "\n".join(
        ["Outputs"] + [f"  {path.ljust(width)}  {what}" for path, what in rows]
        + ["Next", f"  python -m babylm_jax.evaluate --workdir {workdir} --data_dir DATA_DIR",
           f"  python -m babylm_jax.export --workdir {workdir} --output {os.path.join(workdir, 'hf')}"])


def format_summary(s: dict) -> str:
    """The end-of-run summary as a small readable table."""
    rows = [
        ("parameters", f"{s['parameters']:,}"),
        ("steps", f"{s['steps']:,}"),
        ("tokens seen", f"{s['tokens_seen']:,}"),
        ("jieba words seen", f"{s['words_seen']:,.0f}"),
        ("final train loss", f"{s['final_train_loss']:.4f}"),
        ("final eval loss", f"{s['final_eval_loss']:.4f}"),
        ("wall time", f"{s['wall_time_s']:.1f} s"),
        ("mean tokens/s", f"{s['mean_tokens_per_s']:,.0f}"),
        ("mean MFU", f"{s['mean_mfu']:.3f} (peak: {s['mfu_peak_source']})"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(["Run summary"] + [f"  {k.ljust(width)}  {v}" for k, v in rows])
