"""A trained model from a workdir, for evaluation and export: config, tokenizer and params of one checkpoint.

    loaded = load_for_eval(workdir, step=None, use_ema=None)   # the latest checkpoint; EMA when kept
"""
from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp

from babylm_jax.core import rundir
from babylm_jax.core.rundir import WorkdirError, checkpoint_steps, reading
from babylm_jax.corpus.tokenizer import load_tokenizer
from babylm_jax.model.aux_heads import AUX_COLLECTION
from babylm_jax.model.loaded import LoadedModel
from babylm_jax.training.run_config import load_run_config
from babylm_jax.training.state import TrainState, abstract_state


def _milestone_steps(workdir: str) -> list[int]:
    return sorted(step for step, root in checkpoint_steps(workdir).items() if os.path.basename(root) == rundir.MILESTONES)


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
