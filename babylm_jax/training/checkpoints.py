"""Checkpoints: orbax checkpoints of the train state, the grain iterator and run metadata; the word
milestones that get a checkpoint of their own; a trained model loaded from one for evaluation and export.

Layout of a workdir:
    config.json                 the run's config (checked on resume)
    tokenizer/                  written by the data pipeline
    checkpoints/<step>/         rolling checkpoints (state, data iterator, meta with a copy of the config
                                and the tokenizer's vocabulary: `checkpoint_vocabulary`)
    milestones/<step>/          word-milestone checkpoints, never deleted (BabyLM asks for checkpoints at
                                1M, 2M, ..., 10M, 20M, ..., 100M words seen: `WordMilestones`)
    checkpoints_corrupt/<step>/ damaged checkpoints, moved aside at resume and kept for inspection
Orbax writes each checkpoint to a temporary directory and renames it when complete. A run
resumes from the newest checkpoint that reads back whole (`Checkpointer.restore_latest`);
config.json is checked before (`run_config.check_config`) and written only after that restore.
A trained model is loaded for evaluation and export by `load_for_eval`:

    loaded = load_for_eval(workdir, step=None, use_ema=None)   # the latest checkpoint; EMA when kept

The checkpoint folders may be on a remote filesystem (`root` a gs:// or other `etils.epath` URL,
see core.remote): orbax and tensorstore write there themselves.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Iterator

import jax
import orbax.checkpoint as ocp
from etils import epath
import tensorstore as ts
from absl import logging

from babylm_jax.core import remote, rundir
from babylm_jax.core.rundir import WorkdirError, checkpoint_steps, reading
from babylm_jax.corpus.tokenizer import vocabulary_record
from babylm_jax.corpus.tokenizer_kinds import load_tokenizer
from babylm_jax.model.aux_heads import AUX_COLLECTION
from babylm_jax.eval.loaded import LoadedModel
from babylm_jax.training import disk_space
from babylm_jax.training.checkpoint_vocabulary import RESUME_FIX, check_vocabulary
from babylm_jax.training.run_config import CheckpointError, load_run_config
from babylm_jax.training.state import TrainState, abstract_state, state_bytes


class CorruptCheckpoint(Exception):
    """One checkpoint directory is damaged (missing or truncated files, unreadable metadata)."""


def iterator_state(iterator: Any) -> dict:
    """A grain iterator's position as JSON.

    Every process walks the same global sequence of batches (each keeps its own rows), so
    the state is the same on all processes and process 0's copy serves them all.
    """
    state = iterator.get_state()
    if isinstance(state, bytes):  # grain DataLoader iterators report JSON bytes
        return {"encoding": "bytes", "state": state.decode()}
    return {"encoding": "dict", "state": state}


def _state_outline(state: Any) -> Any:
    """Keys and value types of an iterator state (what a saved state must share with a fresh one)."""
    if isinstance(state, dict):
        return {k: _state_outline(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return [_state_outline(v) for v in state]
    return "number" if isinstance(state, (int, float)) and not isinstance(state, bool) else type(state).__name__


def check_iterator_state(iterator: Any, saved: Any) -> None:
    """Raises CorruptCheckpoint unless `saved` has the form of `iterator`'s own state."""
    fresh = iterator_state(iterator)
    if not isinstance(saved, dict) or saved.get("encoding") != fresh["encoding"] or "state" not in saved:
        raise CorruptCheckpoint(f"data iterator state has the wrong form: {str(saved)[:200]}")
    state, fresh_state = saved["state"], fresh["state"]
    if saved["encoding"] == "bytes":
        try:
            state, fresh_state = json.loads(state), json.loads(fresh_state)
        except (TypeError, ValueError) as error:
            raise CorruptCheckpoint(f"data iterator state is not JSON: {error}") from None
    if _state_outline(state) != _state_outline(fresh_state):
        raise CorruptCheckpoint(f"data iterator state {str(state)[:200]} does not fit this data pipeline")


def restore_iterator_state(iterator: Any, saved: dict) -> None:
    state = saved["state"]
    iterator.set_state(state.encode() if saved["encoding"] == "bytes" else state)


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _leaf_shapes(tree: Any) -> dict[str, tuple]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {".".join(_key_name(k) for k in path): tuple(leaf.shape) for path, leaf in leaves if leaf is not None}


def _stored_shapes(state_dir: str) -> dict[str, tuple]:
    """Global array shapes of an orbax (OCDBT) state directory, after reading every stored value.

    Reading all values one by one finds truncated and missing data files (CorruptCheckpoint)
    without the stray thread tracebacks a failed parallel orbax read prints.
    """
    try:
        base = f"{state_dir}/" if remote.is_remote(state_dir) else f"file://{state_dir}/"
        store = ts.KvStore.open({"driver": "ocdbt", "base": base}).result()
        shapes = {}
        for key in store.list().result():
            value = store.read(key).result()
            if value.state != "value":
                raise ValueError(f"{key.decode()} is missing")
            for suffix in (b"/.zarray", b"/zarr.json"):
                if key.endswith(suffix):
                    shapes[key[: -len(suffix)].decode()] = tuple(json.loads(value.value)["shape"])
    except Exception as error:  # noqa: BLE001 - tensorstore reports damage as ValueError and others
        raise CorruptCheckpoint(f"state arrays are unreadable: {str(error)[:300]}") from None
    return shapes


def check_state_shapes(state_dir: str, target: TrainState) -> None:
    """Raises CheckpointError when the saved arrays have other names or shapes than `target`
    (a checkpoint of another model config), CorruptCheckpoint when their metadata is unreadable."""
    try:
        tree = json.loads((epath.Path(state_dir) / "_METADATA").read_text())["tree_metadata"]
        saved_names = {
            ".".join(str(k["key"]) for k in v["key_metadata"])
            for v in tree.values() if v["value_metadata"]["value_type"] != "None"
        }
    except Exception as error:  # noqa: BLE001 - missing file, garbage JSON, another layout
        raise CorruptCheckpoint(f"state/_METADATA is unreadable: {error}") from None
    wanted = _leaf_shapes(target)
    step_dir = str(epath.Path(state_dir).parent)
    if saved_names != set(wanted):
        name = sorted(saved_names ^ set(wanted))[0]
        where = "the checkpoint" if name in saved_names else "this config"
        raise CheckpointError(
            f"checkpoint {step_dir} was trained with another model config: only {where} has the array {name}; "
            "use a new --workdir or that run's config"
        )
    saved = _stored_shapes(state_dir)
    if set(saved) != saved_names:
        raise CorruptCheckpoint(f"state arrays are missing: {sorted(saved_names - set(saved))[:3]}")
    for name in sorted(wanted):
        if saved.get(name) != wanted[name]:
            raise CheckpointError(
                f"checkpoint {step_dir} holds {name} of shape {saved.get(name)}, but this config makes "
                f"{wanted[name]}: it was trained with another model config; use a new --workdir or that run's config"
            )


def move_aside(step_dir: str, workdir: str) -> str:
    """Moves a damaged checkpoint to <workdir>/checkpoints_corrupt/ (kept for inspection); returns where."""
    target_root = os.path.join(workdir, rundir.CORRUPT)
    os.makedirs(target_root, exist_ok=True)
    target = os.path.join(target_root, os.path.basename(step_dir))
    n = 1
    while os.path.exists(target):
        target = os.path.join(target_root, f"{os.path.basename(step_dir)}-{n}")
        n += 1
    os.replace(step_dir, target)
    return target


class Checkpointer:
    """Rolling checkpoints every N steps plus permanent word-milestone checkpoints, in `root`'s
    checkpoints/ and milestones/ (`root`: a local folder or a remote workdir's URL)."""

    def __init__(self, root: str, max_to_keep: int):
        self.is_remote = remote.is_remote(root)
        self.workdir = root if self.is_remote else os.path.abspath(root)
        disk_space.quiet_orbax_space_logs()
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True)
        self.rolling = ocp.CheckpointManager(self._path(rundir.CHECKPOINTS), options=options)
        self.milestones = ocp.CheckpointManager(
            self._path(rundir.MILESTONES),
            options=ocp.CheckpointManagerOptions(create=True, cleanup_tmp_directories=True),
        )

    def _path(self, *parts: str) -> epath.Path:
        return epath.Path(self.workdir).joinpath(*parts)

    def save(self, step: int, state: TrainState, data_iterator: Any, meta: dict, milestone: bool = False) -> None:
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(iterator_state(data_iterator)),
            meta=ocp.args.JsonSave(meta),
        )
        manager = self.milestones if milestone else self.rolling
        if not self.is_remote:  # a bucket has no disk to fill
            disk_space.check_room(str(manager.directory), step, state_bytes(state))
        with disk_space.space_errors(self.roots, step):
            manager.save(step, args=args, force=True)

    @property
    def roots(self) -> tuple[str, str]:
        return (str(self.rolling.directory), str(self.milestones.directory))

    def restore(self, step: int, target: TrainState, data_iterator: Any,
                vocabulary: dict | None = None) -> tuple[TrainState, dict]:
        """Restores state (into `target`'s shardings) and the iterator in place; returns meta.

        Raises CorruptCheckpoint for a damaged checkpoint and CheckpointError for one made by another
        model config or with another `vocabulary` (the run's tokenizer's `vocabulary_record`, when given);
        the iterator is only moved once everything has been read and checked.
        """
        step_dir = self._path(rundir.CHECKPOINTS, str(step))
        for item in ("state", "data", "meta"):
            if not (step_dir / item).is_dir():
                raise CorruptCheckpoint(f"{item}/ is missing")
        check_state_shapes(str(step_dir / "state"), target)
        try:
            restored = self.rolling.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(target),
                    data=ocp.args.JsonRestore(),
                    meta=ocp.args.JsonRestore(),
                ),
            )
            meta = dict(restored.meta)
            int(meta["tokens_seen"]), float(meta["words_seen"])
        except Exception as error:  # noqa: BLE001 - truncated arrays, garbage JSON, missing keys
            first_line = (str(error).splitlines() or [""])[0]
            raise CorruptCheckpoint(f"{type(error).__name__}: {first_line[:300]}") from None
        if vocabulary is not None:
            check_vocabulary(meta, vocabulary, str(step_dir), RESUME_FIX)
        check_iterator_state(data_iterator, restored.data)
        restore_iterator_state(data_iterator, restored.data)
        return restored.state, meta

    def restore_latest(
        self, target: TrainState, data_iterator: Any, move_damaged: bool = True, vocabulary: dict | None = None
    ) -> tuple[int, TrainState, dict] | None:
        """Restores the newest valid rolling checkpoint; damaged ones are moved aside with a warning.

        Returns None for a workdir without checkpoints; raises CheckpointError when none is
        valid, or at the first damaged one when not `move_damaged` (processes of a multi-process
        run cannot agree on which to skip).
        """
        root = self._path(rundir.CHECKPOINTS)
        steps = sorted((int(p.name) for p in root.iterdir() if p.name.isdigit()), reverse=True) if root.is_dir() else []
        moved = []
        for step in steps:
            step_dir = str(root / str(step))
            try:
                state, meta = self.restore(step, target, data_iterator, vocabulary)
            except CorruptCheckpoint as error:
                if not move_damaged or self.is_remote:
                    raise CheckpointError(f"checkpoint {step_dir} is damaged ({error}); move it aside and run again") from None
                where = move_aside(step_dir, self.workdir)
                moved.append(where)
                message = f"checkpoint {step_dir} is damaged ({error}); moved it to {where}"
                logging.warning(message)
                self.rolling.reload()
                continue
            return step, state, meta
        if moved:
            raise CheckpointError(
                f"no valid checkpoint in {root}: all {len(moved)} were damaged and moved to "
                f"{self._path(rundir.CORRUPT)}; run again to start over from step 0, or restore a copy"
            )
        return None

    def wait(self) -> None:
        with disk_space.space_errors(self.roots):
            self.rolling.wait_until_finished()
            self.milestones.wait_until_finished()

    def close(self) -> None:
        with disk_space.space_errors(self.roots):
            self.rolling.close()
            self.milestones.close()


def word_milestones(unit: float) -> Iterator[float]:
    """1, 2, ..., 10, 20, ..., 100, then every 100 units (BabyLM learning-dynamics checkpoints)."""
    yield from (unit * k for k in range(1, 10))
    yield from (unit * 10 * k for k in range(1, 10))
    k = 1
    while True:
        yield unit * 100 * k
        k += 1


class WordMilestones:
    """The next milestone after the words already seen (none when `enabled` is off)."""

    def __init__(self, unit: float, words_seen: float, enabled: bool):
        self._upcoming = (m for m in word_milestones(unit) if m > words_seen)
        self.next = next(self._upcoming) if enabled else math.inf

    def passed(self, words_seen: float) -> float | None:
        """The milestone `words_seen` has just reached (advancing past all reached), else None."""
        if words_seen < self.next:
            return None
        reached = self.next
        while self.next <= words_seen:
            self.next = next(self._upcoming)
        return reached


def _milestone_steps(workdir: str) -> list[int]:
    return sorted(step for step, root in checkpoint_steps(workdir).items() if os.path.basename(root) == rundir.MILESTONES)


def milestone_for_words(workdir: str, words: float) -> int:
    """The step of the first word-milestone checkpoint with at least `words` words seen (its meta says)."""
    seen = {step: float(json.loads((epath.Path(workdir) / rundir.MILESTONES / str(step) / "meta" / "metadata")
                                   .read_text()).get("words_seen", 0.0)) for step in _milestone_steps(workdir)}
    reached = [step for step in sorted(seen) if seen[step] >= words]
    if not reached:
        kept = ", ".join(f"{seen[step]:,.0f} words (step {step})" for step in sorted(seen)) or "none"
        raise FileNotFoundError(f"--milestone: no word-milestone checkpoint in {workdir} has seen {words:,.0f} words; "
                                f"kept: {kept}")
    return reached[0]


def _find_step(workdir: str, step: int | None) -> tuple[str, int]:
    """The checkpoint directory (rolling or milestone) holding `step` (default: latest)."""
    found = checkpoint_steps(workdir)
    if not found:
        raise FileNotFoundError(f"no checkpoint in {workdir} (looked in checkpoints/ and milestones/)")
    if step is None:
        step = max(found)
    if step not in found:
        raise FileNotFoundError(f"no checkpoint for step {step} in {workdir}; available: {sorted(found)}")
    return found[step], step


def _restore_for_eval(root: str, step: int, target: TrainState) -> tuple[TrainState, dict]:
    """The state and meta of checkpoint `step` under `root`; a damaged one is named (ValueError)."""
    where = os.path.join(root, str(step))
    try:
        with ocp.CheckpointManager(root) as manager:
            restored = manager.restore(
                step,
                args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()),
            )
        meta = restored.meta
    except Exception as error:  # noqa: BLE001 - orbax reports damage with many exception types
        message = " ".join(str(error).split())[:300]
        raise ValueError(f"checkpoint {where} cannot be read ({type(error).__name__}: {message}); "
                         "pass --step with another checkpoint (or move this one aside)") from error
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint {where}: meta is not a JSON object; pass --step with another checkpoint")
    return restored.state, dict(meta)


def load_for_eval(workdir: str, step: int | None = None, use_ema: bool | None = None,
                  checkpoints_at: str | None = None) -> LoadedModel:
    """Loads a run's config (typed), tokenizer and params (EMA params when the run kept them); the
    checkpoints are in `checkpoints_at` (a remote workdir's URL), default in `workdir`."""
    workdir = os.path.abspath(workdir)
    config = load_run_config(workdir)  # the one place a run's saved config becomes a RunConfig
    tokenizer_dir = os.path.join(workdir, rundir.TOKENIZER)
    if not os.path.isdir(tokenizer_dir):
        raise FileNotFoundError(f"{tokenizer_dir} not found: the checkpoint has no tokenizer")
    with reading(workdir) as active:
        root, step = _find_step(checkpoints_at or workdir, step)
        if active is not None and os.path.basename(root) != rundir.MILESTONES:
            raise WorkdirError(
                f"a run is active in {workdir} ({active}) and rotates checkpoints/ as it goes, so step {step} may be "
                f"deleted while it is read; wait for the run to finish, or pass --step with a word-milestone "
                f"checkpoint (kept for good): {_milestone_steps(checkpoints_at or workdir) or 'none yet'}")
        target, model = abstract_state(config)
        state, meta = _restore_for_eval(root, step, target)
    tokenizer = load_tokenizer(tokenizer_dir)
    check_vocabulary(meta, vocabulary_record(tokenizer), os.path.join(root, str(step)),
                     "put back the tokenizer/ folder of the run that wrote it", f"the tokenizer in {tokenizer_dir}")
    has_ema = state.ema_params is not None
    if use_ema and not has_ema:
        raise ValueError(f"{workdir} was trained without EMA (train.ema_decay = 0); use --use_ema=auto or --use_ema=no")
    chosen_ema = has_ema if use_ema is None else use_ema
    params = jax.device_get(state.ema_params if chosen_ema else state.params)
    params = {k: v for k, v in params.items() if k != AUX_COLLECTION}  # training-only heads
    return LoadedModel(
        config=config,
        model=model,
        params=params,
        tokenizer=tokenizer,
        step=int(step),
        tokens_seen=int(meta.get("tokens_seen", 0)),
        words_seen=float(meta.get("words_seen", 0.0)),
        used_ema=chosen_ema,
    )
