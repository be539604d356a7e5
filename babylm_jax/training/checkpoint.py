"""Orbax checkpoints of the train state, the grain iterator and run metadata; the run config.

Layout of a workdir:
    config.json                 the run's config (checked on resume)
    tokenizer/                  written by the data pipeline
    checkpoints/<step>/         rolling checkpoints (state, data iterator, meta)
    milestones/<step>/          word-milestone checkpoints, never deleted
Orbax writes each checkpoint to a temporary directory and renames it when complete.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp

from babylm_jax.atomic import atomic_write_json
from babylm_jax.data.jsonl import read_json
from babylm_jax.data.tokenizer import load_tokenizer
from babylm_jax.model.transformer import Transformer
from babylm_jax.training.state import TrainState, abstract_state

CONFIG_FILE = "config.json"
# Keys that must match to resume: they change what the state or the data stream means.
RESUME_KEYS = ("model", "data", "train.batch_size", "train.seq_len", "train.seed", "train.optimizer", "train.ema_decay")


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_or_write_config(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Saves the config; where a checkpoint exists already, refuses incompatible changes first."""
    path = os.path.join(workdir, CONFIG_FILE)
    current = json.loads(config.to_json_best_effort())
    if os.path.exists(path) and _checkpoint_steps(workdir):
        saved = read_json(path, "restore it (it records the run's config) or use a new --workdir")
        old, new = _flatten(saved), _flatten(current)
        for key in sorted(set(old) | set(new)):
            if any(key == k or key.startswith(k + ".") for k in RESUME_KEYS) and old.get(key) != new.get(key):
                raise ValueError(
                    f"workdir {workdir} holds a run with config key {key}={old.get(key)!r}, but this config has "
                    f"{new.get(key)!r}; use a new --workdir or the original config"
                )
    atomic_write_json(path, current)


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


def restore_iterator_state(iterator: Any, saved: dict) -> None:
    state = saved["state"]
    iterator.set_state(state.encode() if saved["encoding"] == "bytes" else state)


class Checkpointer:
    """Rolling checkpoints every N steps plus permanent word-milestone checkpoints."""

    def __init__(self, workdir: str, max_to_keep: int):
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
        self.rolling = ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), "checkpoints"), options=options)
        self.milestones = ocp.CheckpointManager(
            os.path.join(os.path.abspath(workdir), "milestones"), options=ocp.CheckpointManagerOptions(create=True)
        )

    def save(self, step: int, state: TrainState, data_iterator: Any, meta: dict, milestone: bool = False) -> None:
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(iterator_state(data_iterator)),
            meta=ocp.args.JsonSave(meta),
        )
        manager = self.milestones if milestone else self.rolling
        manager.save(step, args=args, force=True)

    def latest_step(self) -> int | None:
        return self.rolling.latest_step()

    def restore(self, step: int, target: TrainState, data_iterator: Any) -> tuple[TrainState, dict]:
        """Restores state (into `target`'s shardings) and the iterator in place; returns meta."""
        restored = self.rolling.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target),
                data=ocp.args.JsonRestore(),
                meta=ocp.args.JsonRestore(),
            ),
        )
        restore_iterator_state(data_iterator, restored.data)
        return restored.state, dict(restored.meta)

    def wait(self) -> None:
        self.rolling.wait_until_finished()
        self.milestones.wait_until_finished()

    def close(self) -> None:
        self.rolling.close()
        self.milestones.close()


@dataclasses.dataclass
class LoadedModel:
    """A trained model ready for evaluation."""

    config: ml_collections.ConfigDict
    model: Transformer
    params: Any
    tokenizer: Any
    step: int
    tokens_seen: int
    words_seen: float
    used_ema: bool


def _checkpoint_steps(workdir: str) -> dict[int, str]:
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
    found = _checkpoint_steps(workdir)
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
        raise ValueError(f"{workdir} was trained without EMA (train.ema_decay = 0); drop --use_ema")
    chosen_ema = has_ema if use_ema is None else use_ema
    params = jax.device_get(state.ema_params if chosen_ema else state.params)
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
