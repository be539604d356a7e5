"""The pretraining loop: `train_and_evaluate` trains (or resumes) a run, step by step.

    summary = train_and_evaluate(RunConfig.from_config(config), workdir)   # the command builds the RunConfig

Running it again on the same workdir resumes from the latest checkpoint (state and data
iterator) and continues the same trajectory: the same batches, the same losses bit for bit on a
CPU or, with train.deterministic, on a GPU. The parts of a run live beside it:
`run.setup_run` (model, data, mesh, state, checkpointer), `step` (the jitted steps), compiled
up front by `compiled.StepPrograms`, `metrics.StepLogger` (step metrics one step late, tokens/s, MFU),
`checkpoints.WordMilestones`, `in_run_eval.RunEvaluator` (eval loss, and task scores
at each eval and milestone) and `summary` (the end-of-run summary and outputs).
"""
from __future__ import annotations

import contextlib
import time

import jax
from tqdm import tqdm

from babylm_jax.config.schema import RunConfig
from babylm_jax.core import platforms
from babylm_jax.core import rundir, writers
from babylm_jax.core.remote import RunPlace
from babylm_jax.core.rundir import workdir_lock
from babylm_jax.training import sharding
from babylm_jax.corpus.tokenizer import vocabulary_record
from babylm_jax.training.checkpoint_vocabulary import VOCABULARY
from babylm_jax.training.checkpoints import WordMilestones
from babylm_jax.training.compiled import StepPrograms, curriculum_lengths, device_arrays
from babylm_jax.training.in_run_eval import RunEvaluator, eval_params, task_files
from babylm_jax.training.metrics import MetricsWriter, StepLogger
from babylm_jax.training.preemption import StopSignals
from babylm_jax.training.run import Run, checked_parts, maybe_initialize_distributed, setup_run
from babylm_jax.training.step import seq_len_at, step_key
from babylm_jax.training.summary import run_summary, write_summary


def train_and_evaluate(config: RunConfig, workdir: str, stop_at_step: int | None = None) -> dict:
    """Trains (or resumes) the run in `workdir`; returns the end-of-run summary.

    `stop_at_step` ends this invocation early (after a checkpoint at that step) without
    changing the schedule, as a preempted job would; running again resumes there.
    SIGTERM, SIGINT or SIGHUP ends it the same way after the current step (`preemption`), raising
    `preemption.Stopped` once the checkpoint is written.
    """
    if not isinstance(config, RunConfig):  # a notebook's ConfigDict: said before any attribute is missed
        raise TypeError(f"train_and_evaluate takes a RunConfig, not a {type(config).__name__}: pass "
                        "RunConfig.from_config(config) (it checks every key as the train command does)")
    if config.train.deterministic:
        platforms.use_deterministic_ops()  # where the train command has not: refused on a GPU already started
    maybe_initialize_distributed(config.distributed)
    place = RunPlace.reached(workdir)
    model, mesh, optimizer = checked_parts(config)  # errors before the workdir is touched
    task_files(config.train)  # the task curves' files, too
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
    writer = writers.open_writers(MetricsWriter(run.workdir, enabled=run.is_main), run.workdir,
                                  config.train, config.to_dict(), run.start_step)
    milestones = WordMilestones(config.checkpoint.milestone_unit, run.words_seen, config.checkpoint.word_milestones)
    step_rng = step_key(config.train)
    run_start = time.perf_counter()
    stopped_at, progress = None, None
    try:  # a stop or an error from here on (the compiles included) still closes the checkpointer below
        first_local = next(run.data.train_iterator)  # step start+1's batch: its shapes are the train step's
        programs = _compile_programs(run, first_local, step_rng, last_step)
        evaluator = RunEvaluator(run, writer, programs)
        logger = StepLogger(writer, run.model.config, config, config.train.log_every_steps, last_step)
        progress = tqdm(total=config.train.num_steps, initial=run.start_step, desc="train", disable=not run.is_main,
                        dynamic_ncols=True)
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
        if progress is not None:
            progress.close()  # the error's one line then starts a line of its own
        writer.close()
        raise
    finally:  # after an error (a NaN loss) or a stop in a compile too: pending saves finish, orbax quietly
        run.checkpointer.close()
    if stopped_at is not None:
        writer.close()
        run.push()
        raise stop.stopped(
            f"stopped by {stop.signal_name} after step {stopped_at}; its checkpoint is in "
            f"{run.place.checkpoints_at}/{rundir.CHECKPOINTS}/{stopped_at}: run the same command to resume"
        )
    summary = run_summary(run, logger, evaluator, last_step, time.perf_counter() - run_start, programs)
    if run.is_main:
        write_summary(run, writer, summary)
    writer.close()
    run.push()  # summary.json, learning_curves.png and the last events, to a remote workdir
    return summary


def _evaluate_and_save(run: Run, step: int, last_step: int, logger: StepLogger,
                       evaluator: RunEvaluator, milestones: WordMilestones, progress: tqdm) -> None:
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


def _compile_programs(run: Run, first_local: dict, rng: jax.Array, last_step: int) -> StepPrograms:
    """The train step at every curriculum length still ahead and the eval step, compiled now; their
    compile times and memory analyses printed (process 0)."""
    programs = StepPrograms(run)
    eval_batches = [sharding.global_batch(device_arrays(b), run.mesh)
                    for b in run.data.eval_batches[: run.config.train.eval_batches]]
    lines = programs.compile_all(sharding.global_batch(device_arrays(first_local), run.mesh), eval_batches,
                                 curriculum_lengths(run.config.train, run.start_step, last_step), rng,
                                 eval_params(run.state))
    if run.is_main:
        print("\n".join(lines), flush=True)
    return programs


def _show(progress: tqdm, entry: dict | None) -> None:
    if entry is not None:
        heads = {k[len("aux_"):-len("_acc")]: f"{entry[k[:-len('acc')] + 'loss']:.2f}/{v:.2f}"  # loss/accuracy
                 for k, v in entry.items() if k.startswith("aux_") and k.endswith("_acc")}
        progress.set_postfix(loss=f"{entry['loss']:.3f}", tok_s=f"{entry['tokens_per_s']:,.0f}", **heads)


def _save(run: Run, logger: StepLogger, step: int, milestone: bool = False) -> None:
    """Checkpoints `step`, logging it first: each step in metrics.jsonl once, and no NaN state saved."""
    logger.flush()
    meta = {"step": step, "tokens_seen": run.tokens_seen, "words_seen": run.words_seen,
            "config": run.config.to_dict(), VOCABULARY: vocabulary_record(run.data.tokenizer)}
    run.checkpointer.save(step, run.state, run.data.train_iterator, meta, milestone=milestone)
    logger.writer.flush()
    run.push()  # metrics and event files up to this checkpoint, to a remote workdir
    logger.restart_window()  # the save's time and the push's are not training time

