"""The run's config in its workdir: config.json written once a run starts, and the keys a resume must keep.

    changes = check_config(workdir, run)   # refuses, by key name, a config that cannot resume the checkpoints
    moved = moved_corpus(workdir, run)     # data.corpus / data.paths changed where inputs.json checks the files
    print(schedule_change_line(run.train, changes, step))   # where train.allow_schedule_change let some through
    write_run_config(workdir, run)   # after a successful restore or a fresh start
    run = load_run_config(workdir)   # the saved config, typed (RunConfig)

A config that cannot resume a workdir's checkpoints raises CheckpointError, as `checkpoints` does for
checkpoints that cannot be resumed.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

from etils import epath

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import TrainConfig
from babylm_jax.config.typed import defaults
from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.core.jsonl import read_json
from babylm_jax.core.rundir import checkpoint_steps
from babylm_jax.training.optimizer import make_schedule

# Keys that must match to resume: they change what the state or the data stream means.
RESUME_KEYS = ("model", "data", "train.batch_size", "train.seq_len", "train.seed", "train.optimizer", "train.ema_decay",
               "train.aux_heads")
# Values of keys that runs made before the key existed had: the schema's defaults (no auxiliary heads).
RESUME_DEFAULTS = defaults(RunConfig)
# Keys that shape the learning-rate, masking and sequence-length schedules over the run's steps:
# changing them mid-run bends the schedule, so resuming refuses it unless train.allow_schedule_change.
LR_KEYS = ("train.num_steps", "train.warmup_steps", "train.schedule", "train.learning_rate", "train.min_lr_ratio",
           "train.decay_share")
SCHEDULE_KEYS = LR_KEYS + ("train.mask_rate", "train.mask_rate_final", "train.seq_len_curriculum")
# Keys that say where the corpus lies: where the workdir records its files' content (inputs.json, checked by
# corpus.run_inputs), a corpus moved or copied elsewhere resumes; a changed content is refused there.
PLACE_KEYS = ("data.corpus", "data.paths")


class CheckpointError(ValueError):
    """A workdir whose checkpoints cannot be resumed (none valid, or made by another config)."""


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _saved_config(workdir: str, checkpoints_at: str | None = None) -> tuple[dict, str] | None:
    """The run's config as saved (config.json, else the newest checkpoint's copy in `checkpoints_at`,
    default `workdir`) and where it came from."""
    path = os.path.join(workdir, rundir.CONFIG)
    if os.path.exists(path):
        saved = read_json(path, "restore it, or delete it to resume with the config the checkpoints hold")
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: expected a JSON object (the run's config); restore it or delete it")
        return saved, path
    return _checkpoint_config(checkpoints_at or workdir)


def _checkpoint_config(checkpoints_at: str) -> tuple[dict, str] | None:
    """The copy of the run's config the newest readable checkpoint in `checkpoints_at` holds, and its file."""
    for step, root in sorted(checkpoint_steps(checkpoints_at).items(), reverse=True):
        meta_path = epath.Path(root) / str(step) / "meta" / "metadata"
        try:
            saved = json.loads(meta_path.read_text()).get("config")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(saved, dict):
            return saved, str(meta_path)
    return None


def _check_model_keys(saved: dict, path: str, workdir: str) -> None:
    """ValueError where config.json (`saved`, at `path`) gives the model other settings than the copy its
    checkpoints hold (a config.json edited by hand, or copied from another run), naming the first key."""
    copy = _checkpoint_config(workdir)
    if copy is None or not isinstance(saved.get("model"), dict):
        return
    kept, new = _flatten(copy[0].get("model") or {}, "model."), _flatten(saved["model"], "model.")
    changed = sorted(key for key in kept.keys() & new.keys() if kept[key] != new[key])
    if changed:
        key = changed[0]
        raise ValueError(f"{path}: {key}={new[key]!r}, but the checkpoints were trained with {key}={kept[key]!r} "
                         f"({copy[1]}); restore config.json, or delete it to use the checkpoints' copy")


def _changed_keys(workdir: str, run: RunConfig, checkpoints_at: str | None) -> tuple[dict[str, tuple], str]:
    """Where the workdir holds checkpoints with a saved config: the keys this config changes, key -> (old,
    new), and where the saved config came from; ({}, "") otherwise."""
    if not checkpoint_steps(checkpoints_at or workdir):
        return {}, ""
    found = _saved_config(workdir, checkpoints_at)
    if found is None:
        return {}, ""  # checkpoints of an older version without a config copy: the restore checks shapes
    saved, source = found
    old, new = _flatten(saved), _flatten(run.to_dict())
    return {key: (old.get(key), new.get(key)) for key in sorted(set(old) | set(new))
            if _normal(old.get(key, RESUME_DEFAULTS.get(key))) != _normal(new.get(key, RESUME_DEFAULTS.get(key)))}, source


def _checked_by_content(workdir: str) -> bool:
    """Whether the workdir records its inputs' content (inputs.json), so PLACE_KEYS may change."""
    return os.path.exists(os.path.join(workdir, rundir.INPUTS))


def check_config(workdir: str, run: RunConfig, checkpoints_at: str | None = None) -> dict[str, tuple[Any, Any]]:
    """Where the workdir holds checkpoints (in `checkpoints_at`, default `workdir`), refuses a config
    that cannot resume them, by key name; returns the schedule keys it changes, key -> (old, new).

    Keys of RESUME_KEYS must match; keys of SCHEDULE_KEYS too, unless train.allow_schedule_change; keys
    of PLACE_KEYS may change where the workdir records its inputs' content (see `moved_corpus`).
    The saved config is compared key by key as saved (not typed): a run of an older version, whose
    keys the schema no longer takes, is refused by the key that differs.
    """
    changed, source = _changed_keys(workdir, run, checkpoints_at)
    allow_schedule = run.train.allow_schedule_change
    by_content = _checked_by_content(workdir)
    for key, (was, now) in changed.items():
        if by_content and _under(key, PLACE_KEYS):
            continue
        if _under(key, RESUME_KEYS + (() if allow_schedule else SCHEDULE_KEYS)):
            fix = "use a new --workdir or the original config"
            if key in SCHEDULE_KEYS:
                fix += " (or set --config.train.allow_schedule_change=True to bend the schedule from the last checkpoint on)"
            raise CheckpointError(
                f"workdir {workdir} holds a run with config key {key}={was!r} ({source}), but this config has "
                f"{now!r}; {fix}"
            )
    return {key: change for key, change in changed.items() if _under(key, SCHEDULE_KEYS)}


def moved_corpus(workdir: str, run: RunConfig, checkpoints_at: str | None = None) -> dict[str, tuple[Any, Any]]:
    """The keys of PLACE_KEYS that this config changes, key -> (old, new), where the workdir records its
    inputs' content (their files are then checked by content, not by place)."""
    if not _checked_by_content(workdir):
        return {}
    changed, _ = _changed_keys(workdir, run, checkpoints_at)
    return {key: change for key, change in changed.items() if _under(key, PLACE_KEYS)}


def moved_corpus_line(moved: dict[str, tuple[Any, Any]]) -> str:
    """One line on a corpus that moved and kept its content (after inputs.json's check passed)."""
    keys = ", ".join(f"{key} {was!r} -> {now!r}" for key, (was, now) in moved.items())
    return (f"the corpus moved ({keys}); its files' content is the same as the run was started from "
            f"({rundir.INPUTS}: names, sizes, sha256): resuming")


def _under(key: str, keys: tuple[str, ...]) -> bool:
    """Whether `key` is one of `keys` or inside one of them."""
    return any(key == k or key.startswith(k + ".") for k in keys)


def schedule_change_line(train: TrainConfig, changes: dict[str, tuple[Any, Any]], step: int) -> str:
    """One line on a schedule changed at a resume from `step`: the keys, old -> new, and the learning
    rate of the last step trained (old schedule) and of the next one (new schedule)."""
    old_train = dataclasses.replace(train, **{key.split(".")[1]: was for key, (was, _) in changes.items()
                                              if key in LR_KEYS})
    old_lr, new_lr = float(make_schedule(old_train)(step - 1)), float(make_schedule(train)(step))
    keys = ", ".join(f"{key} {was!r} -> {now!r}" for key, (was, now) in changes.items())
    return (f"train.allow_schedule_change: the schedule changes from step {step + 1} on ({keys}); learning rate "
            f"{old_lr:.3g} at step {step} (old schedule), {new_lr:.3g} at step {step + 1} (new schedule)")


def _normal(value: Any) -> Any:
    """Tuples and lists compare equal (JSON has only lists)."""
    return [_normal(v) for v in value] if isinstance(value, (list, tuple)) else value


def write_run_config(workdir: str, run: RunConfig) -> None:
    """Saves the config as the run's config.json (after `check_config` and a successful restore)."""
    atomic_write_json(os.path.join(workdir, rundir.CONFIG), run.to_dict())


def load_run_config(workdir: str) -> RunConfig:
    """The run's config.json, typed; ValueError names the file and the bad key. A run copied without its
    config.json takes the copy its newest checkpoint holds, and says so."""
    path = os.path.join(workdir, rundir.CONFIG)
    if not os.path.exists(path):
        found = _saved_config(workdir)
        if found is None:
            raise FileNotFoundError(f"{path} not found: {workdir} is not a babylm_jax run directory (or one copied "
                                    "without its config.json and checkpoints)")
        saved, path = found
        logging.warning("%s not found: using the run's config as its checkpoint saved it (%s)",
                        os.path.join(workdir, rundir.CONFIG), path)
    else:
        saved = read_json(path, "restore the run's config.json (train writes it at the start)")
        if isinstance(saved, dict):
            _check_model_keys(saved, path, workdir)
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: expected a JSON object (the run's config); restore the run's config.json")
    try:
        return RunConfig.from_config(saved)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
