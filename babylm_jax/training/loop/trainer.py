"""The pretraining loop: the jitted train and eval steps, and `train_and_evaluate`.

    summary = train_and_evaluate(RunConfig.from_config(config), workdir)   # the command builds the RunConfig

Running it again on the same workdir resumes from the latest checkpoint (state and data
iterator) and continues the identical trajectory. The parts of a run live beside it:
`run.setup_run` (model, data, mesh, state, checkpointer), `metrics.StepLogger` (step
metrics one step late, tokens/s, MFU), `milestones.WordMilestones` and
`task_curves.TaskCurves` (task scores at each eval and milestone).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax
from etils import epath
from tqdm import tqdm

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.train import MeshConfig
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.model import aux_heads, objectives
from babylm_jax.model.attention import platform_of
from babylm_jax.model.transformer import Transformer, count_params
from babylm_jax.training.metrics import step_logger as metrics_lib
from babylm_jax.core import rundir, writers
from babylm_jax.training.step import optim, sharding
from babylm_jax.training.accelerators.compiled import StepPrograms, curriculum_lengths, device_arrays
from babylm_jax.training.step.curricula import mask_rate_at, seq_len_at
from babylm_jax.training.checkpoints.milestones import WordMilestones
from babylm_jax.training.loop.preemption import StopSignals
from babylm_jax.training.loop.run import Run, checked_parts, maybe_initialize_distributed, setup_run
from babylm_jax.core import remote
from babylm_jax.core.remote import RunPlace
from babylm_jax.core.rundir import workdir_lock
from babylm_jax.training.step.state import TrainState
from babylm_jax.training.loop.task_curves import TaskCurves


def reshape_rows(batch: dict, length: int) -> dict:
    """Splits [B, L] rows into [B * L/length, length] rows (sequence-length curriculum)."""
    out = {}
    for k, v in batch.items():
        if v.ndim == 2 and v.shape[1] != length:
            out[k] = v.reshape(-1, length)
        else:
            out[k] = v
    return out


def row_groups(mesh: MeshConfig) -> int:
    """The devices a batch's rows are split over (`sharding.batch_sharding`): the loss gathers
    and projects each device's rows on that device (`objectives.compute_loss`)."""
    if jax.process_count() > 1:
        return jax.device_count()
    return len(sharding.run_devices(mesh, jax.devices()))


def step_platform(platform: str | None = None) -> str:
    """The platform a step is built for: `platform`, else the running backend's ("cpu", "cuda", "tpu")."""
    return platform or platform_of(jax.default_backend())


def make_train_step(config: RunConfig, model: Transformer, optimizer, masking, length: int,
                    platform: str | None = None, groups: int | None = None,
                    aux_objective: aux_heads.AuxObjective | None = None):
    """A pure (state, batch, rng) -> (state, metrics) step with gradient accumulation, for
    `platform` (loss chunks; default: this backend) and `groups` row groups (default: the mesh's),
    with the auxiliary heads of `aux_objective` (train.aux_heads)."""
    train = config.train
    schedule = optim.make_schedule(train)
    accum = train.grad_accum_steps
    deterministic = config.model.dropout == 0.0
    groups = groups or row_groups(config.mesh)
    chunk = objectives.loss_chunk(step_platform(platform), config.model.vocab_size, train.loss_chunk)

    def loss_fn(params, micro, rng, step):
        rows = micro["tokens"].shape[0]
        return objectives.compute_loss(
            model, params, micro, rng,
            mask_rate=mask_rate_at(train, step), max_mask_rate=max(train.mask_rate, train.mask_rate_final),
            masking=masking, causal_rows=int(round(rows * train.hybrid_causal_share)), z_loss=train.z_loss,
            deterministic=deterministic, chunk=chunk, row_groups=groups, summed=accum > 1, aux_objective=aux_objective,
        )

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step_fn(state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict]:
        batch = reshape_rows(batch, length)
        rng = jax.random.fold_in(rng, state.step)
        if accum == 1:  # no loop: XLA optimises the step as one computation
            (_, aux), grads = grad_fn(state.params, batch, jax.random.fold_in(rng, 0), state.step)
            predicted, loss, aux_sums = aux["predicted_tokens"], aux["loss"], aux.get("aux", {})
        else:
            # Micro-batch i takes rows i, i+accum, ...: every device keeps a share of each one.
            # Summed losses and gradients, divided once by all predicted tokens: the mean over
            # the whole batch, as one pass would give (not a mean of the micro-batches' means).
            micro_batches = jax.tree.map(lambda x: jnp.swapaxes(x.reshape(-1, accum, *x.shape[1:]), 0, 1), batch)

            def accumulate(carry, xs):
                grads_sum, loss_sum, predicted, aux_sums = carry
                micro, i = xs
                (_, aux), grads = grad_fn(state.params, micro, jax.random.fold_in(rng, i), state.step)
                return (jax.tree.map(jnp.add, grads_sum, grads), loss_sum + aux["lm_loss_sum"],
                        predicted + aux["predicted_tokens"], jax.tree.map(jnp.add, aux_sums, aux.get("aux", {}))), None

            zeros = jax.tree.map(jnp.zeros_like, state.params)
            aux_zeros = {name: jnp.zeros(3, jnp.float32) for name in (aux_objective.config.names if aux_objective else ())}
            (grads, loss_sum, predicted, aux_sums), _ = jax.lax.scan(
                accumulate, (zeros, jnp.float32(0.0), jnp.float32(0.0), aux_zeros), (micro_batches, jnp.arange(accum)))
            count = jnp.maximum(predicted, 1.0)
            grads = jax.tree.map(lambda g: g / count, grads)
            loss = loss_sum / count
        return apply_update(state, grads, optimizer, train.ema_decay), {
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": schedule(state.step),
            "predicted_tokens": predicted,
            **aux_heads.step_metrics(aux_sums),
        }

    return step_fn


def apply_update(state: TrainState, grads: Any, optimizer: optax.GradientTransformation,
                 ema_decay: float) -> TrainState:
    """The state one optimizer step on: new params and optimizer state, and the EMA params moved."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ema = state.ema_params
    if ema is not None:
        ema = jax.tree.map(lambda e, p: ema_decay * e + (1.0 - ema_decay) * p, ema, params)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state, ema_params=ema)


def make_eval_step(config: RunConfig, model: Transformer, masking, platform: str | None = None,
                   groups: int | None = None):
    """(params, batch) -> (summed loss, predicted tokens) with fixed masking randomness."""
    groups = groups or row_groups(config.mesh)
    chunk = objectives.loss_chunk(step_platform(platform), config.model.vocab_size, config.train.loss_chunk)

    def eval_step(params, batch):
        rows = batch["tokens"].shape[0]
        loss, aux = objectives.compute_loss(
            model, params, batch, jax.random.key(12345),
            mask_rate=config.train.mask_rate_final, masking=masking,
            causal_rows=int(round(rows * config.train.hybrid_causal_share)), chunk=chunk, row_groups=groups,
        )
        return loss * aux["predicted_tokens"], aux["predicted_tokens"]

    return eval_step


def evaluate_loss(eval_step, params, eval_batches: list[dict], mesh) -> float:
    """Token-weighted mean loss over the fixed held-out batches."""
    total, count = 0.0, 0.0
    for batch in eval_batches:
        batch = sharding.global_batch(device_arrays(batch), mesh)
        loss_sum, n = eval_step(params, batch)
        total, count = total + float(loss_sum), count + float(n)
    return total / max(count, 1.0)


def eval_params(state: TrainState) -> Any:
    """The parameters evaluation uses: EMA ones when the run keeps them."""
    return state.ema_params if state.ema_params is not None else state.params


def train_and_evaluate(config: RunConfig, workdir: str, stop_at_step: int | None = None) -> dict:
    """Trains (or resumes) the run in `workdir`; returns the end-of-run summary.

    `stop_at_step` ends this invocation early (after a checkpoint at that step) without
    changing the schedule, as a preempted job would; running again resumes there.
    SIGTERM or SIGINT ends it the same way after the current step (`preemption`), raising
    `preemption.Stopped` once the checkpoint is written.
    """
    maybe_initialize_distributed(config.distributed)
    place = RunPlace.reached(workdir)
    model, mesh, optimizer = checked_parts(config)  # errors before the workdir is touched
    # One run per workdir; in multi-process runs all processes share it and process 0 holds the lock
    # (on a remote workdir, the lock of its mirror on process 0's host).
    is_main = jax.process_index() == 0
    with workdir_lock(place.local, "train") if is_main else contextlib.nullcontext():
        if is_main and place.mirror is not None:
            print(f"{place.workdir}: a remote workdir holds no lock, so process 0 owns the run and nothing refuses "
                  f"a second run on it; this host's copy of its files: {place.local}", flush=True)
        with StopSignals() as stop:
            run = setup_run(config, place, model, mesh, optimizer)
            stop.defer()  # from here a signal ends the run at the end of its current step
            return _train(run, stop_at_step, stop)


def _train(run: Run, stop_at_step: int | None, stop: StopSignals) -> dict:
    """The loop over steps: train, log, evaluate, checkpoint; then the summary."""
    config = run.config
    last_step = config.train.num_steps if stop_at_step is None else min(stop_at_step, config.train.num_steps)
    if run.start_step >= last_step:
        run.checkpointer.close()
        if run.is_main:
            print(f"{run.workdir} is already at step {run.start_step}; nothing to train (to go on, raise "
                  "train.num_steps with train.allow_schedule_change=True)")
        return {"steps": run.start_step, "tokens_seen": run.tokens_seen, "words_seen": run.words_seen}
    writer = writers.open_writers(metrics_lib.MetricsWriter(run.workdir, enabled=run.is_main), run.workdir,
                                  config.train, config.to_dict(), run.start_step)
    milestones = WordMilestones(config.checkpoint.milestone_unit, run.words_seen, config.checkpoint.word_milestones)
    step_rng = jax.random.fold_in(jax.random.key(config.train.seed), 1)
    run_start = time.perf_counter()
    first_local = next(run.data.train_iterator)  # step start+1's batch: its shapes are the train step's
    programs = _compile_programs(run, first_local, step_rng, last_step)
    evaluator = RunEvaluator(run, writer, programs)
    logger = metrics_lib.StepLogger(writer, run.model.config, config, config.train.log_every_steps, last_step)
    progress = tqdm(total=config.train.num_steps, initial=run.start_step, desc="train", disable=not run.is_main,
                    dynamic_ncols=True)
    stopped_at = None
    try:
        for step in range(run.start_step + 1, last_step + 1):
            local = first_local if step == run.start_step + 1 else next(run.data.train_iterator)
            run.words_seen += float(local["batch_words"])  # the global batch's: no exchange between hosts
            run.tokens_seen += logger.tokens_per_step
            batch = sharding.global_batch(device_arrays(local), run.mesh)
            run.state, step_metrics = programs.train(seq_len_at(config.train, step - 1))(run.state, batch, step_rng)
            _show(progress, logger.step_done(step, step_metrics, run.words_seen))
            progress.update(1)
            _evaluate_and_save(run, step, last_step, logger, evaluator, milestones, progress)
            if stop.should_stop(step) and step != last_step:
                if step % config.checkpoint.every_steps:  # not saved above: save it now
                    _save(run, logger, step)
                stopped_at = step
                break
        logger.flush()
        progress.close()
        run.checkpointer.wait()
    except BaseException:
        progress.close()  # the error's one line then starts a line of its own
        writer.close()
        raise
    finally:  # also after an error (a NaN loss): pending saves finish, orbax's threads end quietly
        run.checkpointer.close()
    if stopped_at is not None:
        writer.close()
        run.push()
        raise stop.stopped(
            f"stopped by {stop.signal_name} after step {stopped_at}; its checkpoint is in "
            f"{run.place.checkpoints_at}/{rundir.CHECKPOINTS}/{stopped_at}: run the same command to resume"
        )
    summary = _summary(run, logger, evaluator, last_step, time.perf_counter() - run_start, programs)
    if run.is_main:
        _write_summary(run, writer, summary)
    writer.close()
    run.push()  # summary.json, learning_curves.png and the last events, to a remote workdir
    return summary


def _evaluate_and_save(run: Run, step: int, last_step: int, logger: metrics_lib.StepLogger,
                       evaluator: "RunEvaluator", milestones: WordMilestones, progress: tqdm) -> None:
    """After `step`: the eval (every train.eval_every_steps and at the end), a word-milestone
    checkpoint (with task scores) when the words seen pass one, the rolling checkpoint."""
    config = run.config
    if step % config.train.eval_every_steps == 0 or step == last_step:
        _show(progress, logger.flush())
        progress.write(evaluator.evaluate(step, "eval"))
        logger.restart_window()
    reached = milestones.passed(run.words_seen)
    if reached is not None:
        _save(run, logger, step, milestone=True)
        progress.write(f"step {step}: word milestone {reached:,.0f} (words seen {run.words_seen:,.0f})")
        if evaluator.curves is not None:
            progress.write(evaluator.evaluate(step, "milestone", with_loss=False))
            logger.restart_window()
    if step % config.checkpoint.every_steps == 0 or step == last_step:
        _save(run, logger, step)


def _write_summary(run: Run, writer: writers.RunWriters, summary: dict) -> None:
    """summary.json, the writers' run summary (with budget.json), learning_curves.png, the table."""
    atomic_write_json(os.path.join(run.workdir, rundir.SUMMARY), summary)
    writer.summary({"summary": summary, "budget": _budget(run.workdir)})
    metrics_lib.plot_learning_curves(run.workdir)
    print(format_summary(summary))
    print(format_outputs(run.place))


def _budget(workdir: str) -> dict:
    """budget.json of the run (prepare writes it), or {} when there is none."""
    path = os.path.join(workdir, rundir.BUDGET)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _compile_programs(run: Run, first_local: dict, rng: jax.Array, last_step: int) -> StepPrograms:
    """The train step at every curriculum length still ahead and the eval step, compiled now; their
    compile times and memory analyses printed (process 0)."""
    programs = StepPrograms(run, make_train_step, make_eval_step)
    eval_batches = [sharding.global_batch(device_arrays(b), run.mesh)
                    for b in run.data.eval_batches[: run.config.train.eval_batches]]
    lines = programs.compile_all(sharding.global_batch(device_arrays(first_local), run.mesh), eval_batches,
                                 curriculum_lengths(run.config.train, run.start_step, last_step), rng,
                                 eval_params(run.state))
    if run.is_main:
        print("\n".join(lines), flush=True)
    return programs


class RunEvaluator:
    """Eval loss on the held-out batches and, when `train.eval_tasks` asks, task scores."""

    def __init__(self, run: Run, writer: writers.RunWriters, programs: StepPrograms):
        self.run, self.writer = run, writer
        self.eval_step = lambda params, batch: programs.eval(batch)(params, batch)
        self.batches = run.data.eval_batches[: run.config.train.eval_batches]
        self.curves = TaskCurves.from_config(run.config.train, run.data.tokenizer, run.model, eval_params(run.state))
        self.last_loss, self.last_scores, self.task_seconds = math.nan, {}, 0.0

    def evaluate(self, step: int, at: str, with_loss: bool = True) -> str:
        """Evaluates the current state, writes one metrics record, returns a progress line."""
        params, record = eval_params(self.run.state), {"step": step, "words_seen": self.run.words_seen}
        if with_loss:
            self.last_loss = record["eval_loss"] = evaluate_loss(self.eval_step, params, self.batches, self.run.mesh)
        if self.curves is not None:
            start = time.perf_counter()
            self.last_scores = self.curves.score(params)
            seconds = time.perf_counter() - start
            self.task_seconds += seconds
            record.update({f"task/{name}": acc for name, acc in self.last_scores.items()},
                          task_seconds=seconds, task_at=at)
        self.writer.write(record)
        shown = [f"eval_loss {self.last_loss:.4f}"] if with_loss else []
        shown += [f"{name} {acc:.4f}" for name, acc in self.last_scores.items()]
        return f"step {step}: " + ", ".join(shown)


def _show(progress: tqdm, entry: dict | None) -> None:
    if entry is not None:
        heads = {k[len("aux_"):-len("_acc")]: f"{entry[k[:-len('acc')] + 'loss']:.2f}/{v:.2f}"  # loss/accuracy
                 for k, v in entry.items() if k.startswith("aux_") and k.endswith("_acc")}
        progress.set_postfix(loss=f"{entry['loss']:.3f}", tok_s=f"{entry['tokens_per_s']:,.0f}", **heads)


def _save(run: Run, logger: metrics_lib.StepLogger, step: int, milestone: bool = False) -> None:
    """Checkpoints `step`, logging it first: each step in metrics.jsonl once, and no NaN state saved."""
    logger.flush()
    meta = {"step": step, "tokens_seen": run.tokens_seen, "words_seen": run.words_seen,
            "config": run.config.to_dict()}
    run.checkpointer.save(step, run.state, run.data.train_iterator, meta, milestone=milestone)
    logger.writer.flush()
    run.push()  # metrics and event files up to this checkpoint, to a remote workdir
    logger.restart_window()  # the save's time and the push's are not training time


def _summary(run: Run, logger: metrics_lib.StepLogger, evaluator: RunEvaluator, last_step: int, wall: float,
             programs: StepPrograms) -> dict:
    return {
        "parameters": count_params(run.state.params),
        "steps": last_step,
        "tokens_seen": run.tokens_seen,
        "words_seen": run.words_seen,
        "final_train_loss": logger.history[-1]["loss"] if logger.history else math.nan,
        "final_eval_loss": evaluator.last_loss,
        "final_task_scores": evaluator.last_scores,
        "task_eval_seconds": evaluator.task_seconds,
        "wall_time_s": wall,
        "train_seconds": logger.timer.total_seconds,  # completed steps only: no compiles, evals or checkpoints
        "compiles": programs.count,
        "compile_seconds": programs.seconds,
        "mean_tokens_per_s": logger.timer.tokens_per_s(),
        "mean_mfu": logger.mean_mfu(),
        "mfu_peak_source": logger.peak_source,
    }


RUN_OUTPUTS = (  # (path in the workdir, what it holds), listed at the end of a run when present
    (rundir.CHECKPOINTS, "checkpoints (params, optimizer, data iterator)"),
    (rundir.MILESTONES, "word-milestone checkpoints"),
    (rundir.METRICS, "training and eval metrics, one JSON line per log step"),
    (rundir.LEARNING_CURVES, "loss curves and task scores against words seen"),
    (rundir.SUMMARY, "this summary"),
    (rundir.BUDGET, "jieba word counts against the budget"),
    (rundir.TOKENIZER, "the tokenizer"),
    (rundir.CONFIG, "the resolved config"),
)


def format_outputs(place: RunPlace) -> str:
    """Where the run's outputs are, and the commands that take them further."""
    def exists(name: str) -> bool:  # checkpoints may be in a remote workdir, the rest is in this host's folder
        return (epath.Path(place.checkpoints_at if name in remote.REMOTE_ONLY else place.local) / name).exists()

    rows = [(f"{place.workdir}/{name}", what) for name, what in RUN_OUTPUTS if exists(name)]
    width = max((len(path) for path, _ in rows), default=0)
    return "\n".join(
        ["Outputs"] + [f"  {path.ljust(width)}  {what}" for path, what in rows]
        + ["Next", f"  python -m babylm_jax.evaluate --workdir {shlex.quote(place.workdir)} --data_dir DATA_DIR",
           f"  python -m babylm_jax.export --workdir {shlex.quote(place.workdir)} "
           f"--output {shlex.quote(os.path.join(place.local, 'hf'))}"])  # quoted: they paste as printed


def format_summary(s: dict) -> str:
    """The end-of-run summary as a small readable table."""
    rows = [
        ("parameters", f"{s['parameters']:,}"),
        ("steps", f"{s['steps']:,}"),
        ("tokens seen", f"{s['tokens_seen']:,}"),
        ("jieba words seen", f"{s['words_seen']:,.0f}"),
        ("final train loss", f"{s['final_train_loss']:.4f}"),
        ("final eval loss", f"{s['final_eval_loss']:.4f}"),
        ("wall time", f"{s['wall_time_s']:.1f} s ({s['train_seconds']:.1f} s in steps; {s['compiles']} "
                      f"compiles, {s['compile_seconds']:.1f} s)"),
        ("mean tokens/s", f"{s['mean_tokens_per_s']:,.0f} (tokens over time in steps)"),
        ("mean MFU", f"{s['mean_mfu']:.3f} (peak: {s['mfu_peak_source']})"),
    ]
    rows += [(f"{name} (sample)", f"{acc:.4f}") for name, acc in s.get("final_task_scores", {}).items()]
    if s.get("final_task_scores"):
        rows.append(("task scoring time", f"{s['task_eval_seconds']:.1f} s"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(["Run summary"] + [f"  {k.ljust(width)}  {v}" for k, v in rows])
