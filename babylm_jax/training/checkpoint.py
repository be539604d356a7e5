"""Orbax checkpoints of the train state, the grain iterator and run metadata; the run config.

Layout of a workdir:
    config.json                 the run's config (checked on resume)
    tokenizer/                  written by the data pipeline
    checkpoints/<step>/         rolling checkpoints (state, data iterator, meta with a copy of the config)
    milestones/<step>/          word-milestone checkpoints, never deleted
    checkpoints_corrupt/<step>/ damaged checkpoints, moved aside at resume and kept for inspection
Orbax writes each checkpoint to a temporary directory and renames it when complete. A run
resumes from the newest checkpoint that reads back whole (`Checkpointer.restore_latest`);
config.json is checked before (`check_config`) and written only after that restore.
"""
from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
import tensorstore as ts
from absl import logging

from babylm_jax.atomic import atomic_write_json
from babylm_jax.data.jsonl import read_json
from babylm_jax.data.tokenizer import load_tokenizer
from babylm_jax.data.hanzi_labels import FAMILIES
from babylm_jax.loaded import LoadedModel
from babylm_jax.model.aux_heads import AUX_COLLECTION
from babylm_jax.training.state import TrainState, abstract_state

CONFIG_FILE = "config.json"
CORRUPT_DIR = "checkpoints_corrupt"
# Keys that must match to resume: they change what the state or the data stream means.
RESUME_KEYS = ("model", "data", "train.batch_size", "train.seq_len", "train.seed", "train.optimizer", "train.ema_decay",
               "train.aux_heads")
# Values of resume keys that runs made before the key existed had (no auxiliary heads).
RESUME_DEFAULTS = {**{f"train.aux_heads.{name}": 0.0 for name in FAMILIES}, "train.aux_heads.position": "auto"}
# Keys that shape the learning-rate, masking and sequence-length schedules over the run's steps:
# changing them mid-run bends the schedule, so resuming refuses it unless train.allow_schedule_change.
SCHEDULE_KEYS = (
    "train.num_steps", "train.warmup_steps", "train.schedule", "train.learning_rate", "train.min_lr_ratio",
    "train.decay_share", "train.mask_rate", "train.mask_rate_final", "train.seq_len_curriculum",
)


class CheckpointError(ValueError):
    """A workdir whose checkpoints cannot be resumed (none valid, or made by another config)."""


class CorruptCheckpoint(Exception):
    """One checkpoint directory is damaged (missing or truncated files, unreadable metadata)."""


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _saved_config(workdir: str) -> tuple[dict, str] | None:
    """The run's config as saved (config.json, else the newest checkpoint's copy) and where it came from."""
    path = os.path.join(workdir, CONFIG_FILE)
    if os.path.exists(path):
        saved = read_json(path, "restore it, or delete it to resume with the config the checkpoints hold")
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: expected a JSON object (the run's config); restore it or delete it")
        return saved, path
    for step, root in sorted(checkpoint_steps(workdir).items(), reverse=True):
        meta_path = os.path.join(root, str(step), "meta", "metadata")
        try:
            saved = _read_json(meta_path).get("config")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(saved, dict):
            return saved, meta_path
    return None


def check_config(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Where the workdir holds checkpoints, refuses a config that cannot resume them, by key name.

    Keys of RESUME_KEYS must match; keys of SCHEDULE_KEYS too, unless train.allow_schedule_change.
    """
    if not checkpoint_steps(workdir):
        return
    found = _saved_config(workdir)
    if found is None:
        return  # checkpoints of an older version without a config copy: the restore checks shapes
    saved, source = found
    old, new = _flatten(saved), _flatten(json.loads(config.to_json_best_effort()))
    allow_schedule = bool(config.train.get("allow_schedule_change", False))
    keys = RESUME_KEYS + (() if allow_schedule else SCHEDULE_KEYS)
    for key in sorted(set(old) | set(new)):
        if any(key == k or key.startswith(k + ".") for k in keys) and _normal(
                old.get(key, RESUME_DEFAULTS.get(key))) != _normal(new.get(key, RESUME_DEFAULTS.get(key))):
            fix = "use a new --workdir or the original config"
            if key in SCHEDULE_KEYS:
                fix += " (or set --config.train.allow_schedule_change=True to bend the schedule from the last checkpoint on)"
            raise CheckpointError(
                f"workdir {workdir} holds a run with config key {key}={old.get(key)!r} ({source}), but this config has "
                f"{new.get(key)!r}; {fix}"
            )


def _normal(value: Any) -> Any:
    """Tuples and lists compare equal (JSON has only lists)."""
    return [_normal(v) for v in value] if isinstance(value, (list, tuple)) else value


def write_config(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Saves the config as the run's config.json (after `check_config` and a successful restore)."""
    atomic_write_json(os.path.join(workdir, CONFIG_FILE), json.loads(config.to_json_best_effort()))


def load_config(workdir: str) -> ml_collections.ConfigDict:
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {workdir} is not a babylm_jax run directory")
    saved = read_json(path, "restore the run's config.json (train writes it at the start)")
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: expected a JSON object (the run's config); restore the run's config.json")
    return ml_collections.ConfigDict(saved)


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
        store = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{state_dir}/"}).result()
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
        tree = _read_json(os.path.join(state_dir, "_METADATA"))["tree_metadata"]
        saved_names = {
            ".".join(str(k["key"]) for k in v["key_metadata"])
            for v in tree.values() if v["value_metadata"]["value_type"] != "None"
        }
    except Exception as error:  # noqa: BLE001 - missing file, garbage JSON, another layout
        raise CorruptCheckpoint(f"state/_METADATA is unreadable: {error}") from None
    wanted = _leaf_shapes(target)
    step_dir = os.path.dirname(state_dir)
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
    target_root = os.path.join(workdir, CORRUPT_DIR)
    os.makedirs(target_root, exist_ok=True)
    target = os.path.join(target_root, os.path.basename(step_dir))
    n = 1
    while os.path.exists(target):
        target = os.path.join(target_root, f"{os.path.basename(step_dir)}-{n}")
        n += 1
    os.replace(step_dir, target)
    return target


class Checkpointer:
    """Rolling checkpoints every N steps plus permanent word-milestone checkpoints."""

    def __init__(self, workdir: str, max_to_keep: int):
        self.workdir = os.path.abspath(workdir)
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True)
        self.rolling = ocp.CheckpointManager(os.path.join(self.workdir, "checkpoints"), options=options)
        self.milestones = ocp.CheckpointManager(
            os.path.join(self.workdir, "milestones"),
            options=ocp.CheckpointManagerOptions(create=True, cleanup_tmp_directories=True),
        )

    def save(self, step: int, state: TrainState, data_iterator: Any, meta: dict, milestone: bool = False) -> None:
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(iterator_state(data_iterator)),
            meta=ocp.args.JsonSave(meta),
        )
        manager = self.milestones if milestone else self.rolling
        manager.save(step, args=args, force=True)

    def restore(self, step: int, target: TrainState, data_iterator: Any) -> tuple[TrainState, dict]:
        """Restores state (into `target`'s shardings) and the iterator in place; returns meta.

        Raises CorruptCheckpoint for a damaged checkpoint and CheckpointError for one made
        by another model config; the iterator is only moved once everything has been read.
        """
        step_dir = os.path.join(self.workdir, "checkpoints", str(step))
        for item in ("state", "data", "meta"):
            if not os.path.isdir(os.path.join(step_dir, item)):
                raise CorruptCheckpoint(f"{item}/ is missing")
        check_state_shapes(os.path.join(step_dir, "state"), target)
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
        check_iterator_state(data_iterator, restored.data)
        restore_iterator_state(data_iterator, restored.data)
        return restored.state, meta

    def restore_latest(
        self, target: TrainState, data_iterator: Any, move_damaged: bool = True
    ) -> tuple[int, TrainState, dict] | None:
        """Restores the newest valid rolling checkpoint; damaged ones are moved aside with a warning.

        Returns None for a workdir without checkpoints; raises CheckpointError when none is
        valid, or at the first damaged one when not `move_damaged` (processes of a multi-process
        run cannot agree on which to skip).
        """
        root = os.path.join(self.workdir, "checkpoints")
        steps = sorted((int(n) for n in os.listdir(root) if n.isdigit()), reverse=True) if os.path.isdir(root) else []
        moved = []
        for step in steps:
            step_dir = os.path.join(root, str(step))
            try:
                state, meta = self.restore(step, target, data_iterator)
            except CorruptCheckpoint as error:
                if not move_damaged:
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
                f"{os.path.join(self.workdir, CORRUPT_DIR)}; run again to start over from step 0, or restore a copy"
            )
        return None

    def wait(self) -> None:
        self.rolling.wait_until_finished()
        self.milestones.wait_until_finished()

    def close(self) -> None:
        self.rolling.close()
        self.milestones.close()


def checkpoint_steps(workdir: str) -> dict[int, str]:
    """step -> the directory (rolling or milestone) holding it."""
    found: dict[int, str] = {}
    for sub in ("milestones", "checkpoints"):
        root = os.path.join(workdir, sub)
        if os.path.isdir(root):
            for name in os.listdir(root):
                if name.isdigit() and os.path.isdir(os.path.join(root, name)):
                    found[int(name)] = root
    return found


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


def load_for_eval(workdir: str, step: int | None = None, use_ema: bool | None = None) -> LoadedModel:
    """Loads a run's config, tokenizer and params (EMA params when the run kept them)."""
    workdir = os.path.abspath(workdir)
    config = load_config(workdir)
    tokenizer_dir = os.path.join(workdir, "tokenizer")
    if not os.path.isdir(tokenizer_dir):
        raise FileNotFoundError(f"{tokenizer_dir} not found: the checkpoint has no tokenizer")
    root, step = _find_step(workdir, step)
    target, model = abstract_state(config)
    state, meta = _restore_for_eval(root, step, target)
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
        tokenizer=load_tokenizer(tokenizer_dir),
        step=int(step),
        tokens_seen=int(meta.get("tokens_seen", 0)),
        words_seen=float(meta.get("words_seen", 0.0)),
        used_ema=chosen_ema,
    )
