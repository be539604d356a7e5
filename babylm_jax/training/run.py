"""Setting up a training run: model, optimizer, data, mesh, state (fresh or restored), checkpointer.

    model, mesh, optimizer = checked_parts(config)   # config: the typed RunConfig; nothing touched yet
    run = setup_run(config, place, model, mesh, optimizer)   # everything the loop needs

`place` (core.remote.RunPlace) is where the run lives: a local workdir, or a remote one (gs://...)
with this host's mirror of its files; process 0 prepares the data, the others open what it prepared.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax
from jax.experimental import multihost_utils

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import AUX_HEADS, DistributedConfig
from babylm_jax.corpus.pipeline import TrainData, build_train_data
from babylm_jax.corpus.preparation import open_prepared, prepare_corpus
from babylm_jax.corpus import hanzi_labels
from babylm_jax.corpus import run_inputs
from babylm_jax.corpus.tokenizer import vocabulary_record
from babylm_jax.model import aux_heads, objectives
from babylm_jax.model.transformer import Transformer
from babylm_jax.core import rundir, writers
from babylm_jax.core.remote import RunPlace
from babylm_jax.core.rundir import checkpoint_steps
from babylm_jax.training import sharding
from babylm_jax.training.checkpoint_vocabulary import VOCABULARY, resumable, trained_vocabulary, unrecorded_line
from babylm_jax.training.checkpoints import Checkpointer
from babylm_jax.training.metrics import trim_metrics
from babylm_jax.training.run_config import (check_config, moved_corpus, moved_corpus_line,
                                            schedule_change_line, write_run_config)
from babylm_jax.training.optimizer import make_train_optimizer
from babylm_jax.training.state import TrainState, build_model, sharded_init
from babylm_jax.training.step import make_masking


@dataclasses.dataclass
class Run:
    """A run ready to train: its parts, its state, and how far it has come."""

    config: RunConfig
    place: RunPlace
    is_main: bool
    model: Transformer
    optimizer: optax.GradientTransformation
    data: TrainData
    mesh: jax.sharding.Mesh
    masking: objectives.MaskingConfig
    state: TrainState
    state_shardings: Any
    checkpointer: Checkpointer
    start_step: int
    tokens_seen: int
    words_seen: float
    aux_objective: aux_heads.AuxObjective | None = None  # auxiliary heads (train.aux_heads)

    @property
    def workdir(self) -> str:
        """This host's folder of the run: metrics, summaries and data are written here."""
        return self.place.local

    def push(self) -> None:
        """Process 0 sends the run's new files to a remote workdir (nothing to do for a local one)."""
        if self.is_main:
            self.place.push()


def maybe_initialize_distributed(dist: DistributedConfig) -> None:
    if not dist.initialize:
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


def checked_parts(run_config: RunConfig) -> tuple[Transformer, jax.sharding.Mesh, optax.GradientTransformation]:
    """The model, mesh and optimizer of the run, checked against the devices, the processes and the
    writers' packages before any work."""
    model = build_model(run_config.model)
    devices = sharding.run_devices(run_config.mesh, jax.devices()) if jax.process_count() == 1 else None
    mesh = sharding.make_mesh(run_config.mesh, devices)
    train = run_config.train
    sharding.check_batch_size(train.batch_size, mesh)
    if train.batch_size % (jax.process_count() * train.grad_accum_steps):
        raise ValueError(
            f"config key train.batch_size={train.batch_size} must divide evenly over "
            f"{jax.process_count()} processes x train.grad_accum_steps={train.grad_accum_steps}"
        )
    writers.chosen_writers(train.writers)  # a writer whose package is missing: before any work
    if jax.process_index() == 0:  # the process that writes: W&B's credentials
        writers.check_wandb_ready(train.writers, train.wandb.mode)
    if any(getattr(train.aux_heads, head) > 0 for head in AUX_HEADS):  # the heads' packages
        hanzi_labels.head_sizes()
    return model, mesh, make_train_optimizer(train)


def _train_data(run_config: RunConfig, place: RunPlace, is_main: bool) -> TrainData:
    """Process 0 prepares the data (and pushes it to a remote workdir); the others then open what it
    prepared (pulled into their mirror), without reading the corpus's sources. A trained workdir's
    checkpoints refuse a tokenizer of another vocabulary before it replaces the workdir's."""
    if is_main:
        check = resumable(trained_vocabulary(place.checkpoints_at, place.local))
        prepared = prepare_corpus(run_config, place.local, check_tokenizer=check)
    if jax.process_count() > 1:
        if is_main:
            place.push()
        multihost_utils.sync_global_devices("babylm_jax: data prepared")
        if not is_main:
            place.pull()
            prepared = open_prepared(run_config, place.local)
    data = build_train_data(run_config, place.local, process_index=jax.process_index(),
                            process_count=jax.process_count(), prepared=prepared)
    if data.tokenizer.vocab_size > run_config.model.vocab_size:
        raise ValueError(
            f"config key model.vocab_size={run_config.model.vocab_size} is smaller than the tokenizer's "
            f"{data.tokenizer.vocab_size} ids"
        )
    return data


def _checked_inputs(run_config: RunConfig, place: RunPlace) -> tuple[dict[str, dict], bool]:
    """The corpus's files, and whether the workdir's record of its inputs stands: at a resume (the
    workdir holds checkpoints) inputs that differ from the record are refused here, before any work."""
    corpus = run_inputs.corpus_files(run_config.data, place.local)
    return corpus, bool(checkpoint_steps(place.checkpoints_at)) and run_inputs.check_inputs(place.local, corpus)


def setup_run(run_config: RunConfig, place: RunPlace, model: Transformer, mesh: jax.sharding.Mesh,
              optimizer: optax.GradientTransformation) -> Run:
    """Builds the data, state and checkpointer of the run at `place`, resuming from its newest
    valid checkpoint if any; config.json (and at a first start inputs.json) is written once the run
    has restored or started."""
    is_main = jax.process_index() == 0
    schedule_changes, corpus, recorded = {}, {}, True
    if is_main:
        place.pull()  # a run resumed on a fresh host: its config, metrics and data from the remote workdir
        schedule_changes = check_config(place.local, run_config, place.checkpoints_at)
        corpus, recorded = _checked_inputs(run_config, place)
        moved = moved_corpus(place.local, run_config, place.checkpoints_at)
        if moved:
            print(moved_corpus_line(moved))
    data = _train_data(run_config, place, is_main)
    if is_main and not data.eval_batches:
        print(no_held_out_line(run_config, data.stats))
    init_unboxed, state_shardings, target = sharded_init(run_config, model, optimizer, mesh)
    checkpointer = Checkpointer(place.checkpoints_at, run_config.checkpoint.max_to_keep)
    try:  # a stop or an error from here on (init's compile included) closes it: orbax's threads end here, not at exit
        start_step, tokens_seen, words_seen = 0, 0, 0.0
        restored = checkpointer.restore_latest(target, data.train_iterator, move_damaged=jax.process_count() == 1,
                                               vocabulary=vocabulary_record(data.tokenizer))
        if restored is not None:
            start_step, state, meta = restored
            tokens_seen, words_seen = int(meta["tokens_seen"]), float(meta["words_seen"])
            if is_main:
                if VOCABULARY not in meta:
                    print(unrecorded_line(f"{place.workdir}/{rundir.CHECKPOINTS}/{start_step}"))
                print(f"Resuming {place.workdir} from step {start_step} ({tokens_seen:,} tokens, "
                      f"{words_seen:,.0f} words seen)")
                if schedule_changes:
                    print(schedule_change_line(run_config.train, schedule_changes, start_step))
        else:
            state = init_unboxed(jax.random.fold_in(jax.random.key(run_config.train.seed), 0))
        if is_main:
            if not recorded:
                _record_inputs(place, corpus, resumed=restored is not None)
            write_run_config(place.local, run_config)
            trim_metrics(place.local, start_step)
            trim_metrics(place.local, start_step, rundir.SAMPLES)
            place.push()
        aux_objective = aux_heads.build_objective(run_config.train, hanzi_labels.tokenizer_pieces(data.tokenizer),
                                                  run_config.model.vocab_size, run_config.model.family)
    except BaseException:
        checkpointer.close()
        raise
    return Run(run_config, place, is_main, model, optimizer, data, mesh, make_masking(run_config.data, data.tokenizer),
               state, state_shardings, checkpointer, start_step, tokens_seen, words_seen, aux_objective)


def no_held_out_line(run_config: RunConfig, stats: dict) -> str:
    """The line a run that holds no document out says at its start: why, and how to hold some out."""
    documents = stats["train"]["documents"] + stats["eval"]["documents"]
    if run_config.data.eval_share == 0:
        why, fix = "data.eval_share=0", "set data.eval_share above 0 (e.g. 0.01)"
    else:
        why = f"the corpus is {documents:,} document{'s' * (documents != 1)}, too few for data.eval_share"
        fix = ("give the corpus more documents (a .txt file's documents are its blocks between blank lines; "
               "data.txt_documents='line' makes each line one)")
    return (f"no held-out text ({why}): the eval loss is not measured, and is absent from {rundir.METRICS} and "
            f"{rundir.SUMMARY}; to measure it, {fix}")


def _record_inputs(place: RunPlace, corpus: dict[str, dict], resumed: bool) -> None:
    """Records the run's inputs; a resumed run older than the record says so in one line."""
    run_inputs.record_inputs(place.local, corpus)
    if resumed:
        print(f"{place.workdir} has no record of the inputs it was started from (a run older than {rundir.INPUTS}, or "
              f"copied without it): resumed, as the tokenizer made from this corpus has the vocabulary its checkpoint "
              f"was trained with; its corpus and tokenizer files are now recorded in {rundir.INPUTS} and checked at "
              "every later resume")
