"""Runs registry tasks on a loaded model: each spec's runner function, a failure not stopping the others,
a signal stopping the rest."""
from __future__ import annotations

import pathlib
import time
from typing import Callable, Sequence

from babylm_jax.core.stops import Stopped
from babylm_jax.eval.finetune import classifier
from babylm_jax.eval.fmri import encoding
from babylm_jax.eval.zero_shot import minimal_pairs
from babylm_jax.eval.results import TaskResult
from babylm_jax.config.evaluation import EvalSettings
from babylm_jax.eval.loaded import LoadedModel
from babylm_jax.tasks.registry import TaskRunner, TaskSpec

Runner = Callable[[TaskSpec, LoadedModel, pathlib.Path, EvalSettings], TaskResult]
RUNNERS: dict[TaskRunner, Runner] = {  # TaskSpec.runner -> the function that scores the task
    TaskRunner.MINIMAL_PAIRS: minimal_pairs.run_minimal_pairs,
    TaskRunner.FINETUNE: classifier.run_finetune,
    TaskRunner.WORD_FMRI: encoding.run_word_fmri,
    TaskRunner.FMRI: encoding.run_fmri,
}


def run_registry_task(spec: TaskSpec, loaded: LoadedModel, data_dir: str | pathlib.Path,
                      settings: EvalSettings) -> TaskResult:
    """The task's result on the loaded model."""
    return RUNNERS[spec.runner](spec, loaded, pathlib.Path(data_dir), settings)


def run_registry_tasks(
    loaded: LoadedModel,
    data_dir: str | pathlib.Path,
    specs: Sequence[TaskSpec],
    settings: EvalSettings,
) -> tuple[dict[str, TaskResult], dict[str, Exception], Stopped | None]:
    """Runs each task on the loaded model: (name -> TaskResult in the given order, name -> its error,
    the stop by a signal that ended the loop, naming the task it interrupted, or None).

    A task that fails does not stop the others; a signal stops the rest. Each result's details get
    the task's wall time (`seconds`). The caller writes what finished, then reports it.
    """
    results, failed = {}, {}
    for spec in specs:
        try:
            print(f"[evaluate] {spec.name} ({spec.track}) ...", flush=True)
            started = time.perf_counter()
            results[spec.name] = run_registry_task(spec, loaded, data_dir, settings)
            results[spec.name].details["seconds"] = round(time.perf_counter() - started, 1)
        except Exception as error:  # noqa: BLE001 - recorded, and raised again once the others are written
            print(f"[evaluate] {spec.name} failed: {type(error).__name__}: {error}", flush=True)
            failed[spec.name] = error
        except Stopped as stopped:  # the finished tasks are kept, as when a task fails
            return results, failed, Stopped(stopped.signum, f"stopped by {stopped.signal_name} in {spec.name}")
    return results, failed, None
