"""Fine-tuning settings to and from the official pipeline's `config.yaml`, and the named protocols.

The official pipeline (upstream `pipeline.py eval`) reads a participant's
`config.yaml`; the final evaluation runs it with the file each team fixed at upload:

    finetune_hparams:
      lr: 3.0e-5            # global values; any missing one is the pipeline's default
      batch_size: 32
      max_epochs: 10
      sequence_length: 128
      seed: 42
      task_overrides:       # merged over the global values, per task
        cluewsc2020: {max_epochs: 30}

A task's settings are `{**global (with defaults), **task_overrides[task]}`, exactly as the
pipeline merges them, so a file without a cluewsc2020 override trains it 10 epochs. The
older pipeline (2c8a2d9) spelled that override `wsc_epochs: 30`, read here as
`task_overrides.cluewsc2020.max_epochs`. `train_examples: N` (babylm_jax's own key, which the
official pipeline ignores) fine-tunes on a fixed N of each training split. Here they become
per-task overrides of `FinetuneOptions` fields (`TaskSettings`).

`FinetuneOptions` is one task's protocol, `finetune.*` of the evaluation config (config/evaluation.py);
its defaults are the official protocol, the one home of its values.

Named protocols: "official" (the pipeline's `configs/config.yaml`: `FinetuneOptions`' defaults and
`OFFICIAL_TASK_FINETUNE`), "quick" (a check that fits a laptop CPU, not
comparable with official scores: 2 epochs over a fixed 3,000 examples of each training split,
cluewsc2020 6 epochs over its 1,244; full dev splits) and "eval_finetuning_sh" (the older
script: batch 64, 5 epochs, cluewsc2020 5, length 512).
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

from babylm_jax.config.typed import Rule
from babylm_jax.core.atomic import atomic_write_text
from babylm_jax.core.jsonl import read_text
from babylm_jax.tasks.registry import official_tasks


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
    """One fine-tuning task's protocol: `finetune.*`, with `finetune.tasks.<task>.*` over it.

    The defaults up to `seed` are the official protocol (the pipeline's configs/config.yaml,
    finetune/trainer.py and utils.py); the keys after it are babylm_jax's own."""

    learning_rate: float = 3e-5  # AdamW (b2 0.999, eps 1e-8)
    batch_size: int = 32  # examples a step; the last partial batch of an epoch is dropped, as officially
    epochs: int = 10
    max_len: int = 128  # tokens per input row, special tokens included
    warmup_ratio: float = 0.06  # linear warmup share of the steps, then cosine
    min_lr_ratio: float = 0.1  # the cosine ends at this share of the peak (the official min_factor)
    weight_decay: float = 0.01  # on every parameter, as torch.optim.AdamW over model.parameters()
    max_grad_norm: float = 0.0  # global-norm clipping; 0 = none (the official trainer clips nothing)
    head_dropout: float = 0.1
    seed: int = 42
    train_examples: int = 0  # 0 = the whole training split; N = a fixed, evenly spaced N of it
    rows_multiple: int = 2  # packed training rows per step rounded up to a multiple (fewer compiles)
    eval_rows: int = 64  # packed rows of max_len tokens per evaluation batch
    progress: bool = True  # a progress bar per task
    limit: int | None = None  # keep N evenly spaced examples of each split (`--limit`; set by code, no config key)

    def rules(self) -> list[Rule]:
        return [("learning_rate", self.learning_rate > 0, "must be > 0"),
                ("batch_size", self.batch_size >= 1, "must be >= 1"),
                ("epochs", self.epochs >= 1, "must be >= 1"),
                ("max_len", self.max_len >= 8, "must be >= 8 tokens"),
                ("warmup_ratio", 0 <= self.warmup_ratio < 1, "must be in [0, 1)"),
                ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "must be in [0, 1]"),
                ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
                ("max_grad_norm", self.max_grad_norm >= 0, "must be >= 0 (0 = no clipping)"),
                ("head_dropout", 0 <= self.head_dropout < 1, "must be in [0, 1)"),
                ("seed", 0 <= self.seed < 2**32, "must be in [0, 2**32): a larger one is the same key as a smaller"),
                ("train_examples", self.train_examples >= 0, "must be >= 0 (0 = the whole split)"),
                ("rows_multiple", self.rows_multiple >= 1, "must be >= 1"),
                ("eval_rows", self.eval_rows >= 1, "must be >= 1")]


OFFICIAL_TASK_FINETUNE = {"cluewsc2020": {"epochs": 30}}  # the official config.yaml's task_overrides
OFFICIAL_TASKS = official_tasks("finetune")  # the tasks config.yaml fine-tunes
# config.yaml key -> FinetuneOptions field, and the pipeline's default when the key is missing (the official protocol)
KEYS = {"lr": "learning_rate", "batch_size": "batch_size", "max_epochs": "epochs", "sequence_length": "max_len",
        "seed": "seed", "train_examples": "train_examples"}
_FIELDS = {field: key for key, field in KEYS.items()}
PIPELINE_DEFAULTS = {key: getattr(FinetuneOptions, field) for key, field in KEYS.items()
                     if key != "train_examples"}  # train_examples: babylm_jax's own key, no pipeline default
OFFICIAL_OVERRIDES = {task: {_FIELDS[field]: value for field, value in values.items()}
                      for task, values in OFFICIAL_TASK_FINETUNE.items()}  # cluewsc2020: max_epochs 30
_TYPES = {"lr": float, "batch_size": int, "max_epochs": int, "sequence_length": int, "seed": int, "train_examples": int}
LEGACY_WSC_EPOCHS = "wsc_epochs"  # 2c8a2d9's key: cluewsc2020's max_epochs

TaskSettings = dict[str, dict[str, Any]]  # task -> {FinetuneOptions field: value}

PROTOCOLS: dict[str, dict[str, Any]] = {  # name -> finetune_hparams, as config.yaml holds them
    "official": {**PIPELINE_DEFAULTS, "task_overrides": OFFICIAL_OVERRIDES},
    "quick": {**PIPELINE_DEFAULTS, "max_epochs": 2, "train_examples": 3000,
              "task_overrides": {"cluewsc2020": {"max_epochs": 6}}},
    "eval_finetuning_sh": {**PIPELINE_DEFAULTS, "batch_size": 64, "max_epochs": 5, "sequence_length": 512,
                           "task_overrides": {"cluewsc2020": {"max_epochs": 5}}},
}


def _checked(values: Any, where: str) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: expected a mapping of {sorted(KEYS)}, got {type(values).__name__}")
    out = {}
    for key, value in values.items():
        if key not in KEYS:
            raise ValueError(f"{where}: unknown key {key!r}; known: {sorted(KEYS)} (and task_overrides)")
        kind = _TYPES[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise ValueError(f"{where}.{key}: {value!r} is not {'an integer' if kind is int else 'a number'}")
        if value < 0 or (value == 0 and key not in ("seed", "train_examples")):
            raise ValueError(f"{where}.{key}: {value!r} must be positive")
        out[key] = kind(value)
    return out


def settings_from_hparams(hparams: Mapping[str, Any], tasks: tuple[str, ...] = OFFICIAL_TASKS,
                          where: str = "finetune_hparams") -> TaskSettings:
    """Per-task FinetuneOptions overrides from a `finetune_hparams` mapping, merged as the pipeline does."""
    if not isinstance(hparams, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(hparams).__name__}")
    hparams = dict(hparams)
    overrides = hparams.pop("task_overrides", None) or {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where}.task_overrides: expected a mapping of task -> settings")
    if LEGACY_WSC_EPOCHS in hparams:
        wsc = {"max_epochs": hparams.pop(LEGACY_WSC_EPOCHS), **(overrides.get("cluewsc2020") or {})}
        overrides = {**overrides, "cluewsc2020": wsc}
    glob = {**PIPELINE_DEFAULTS, **_checked(hparams, where)}
    per_task = {task: _checked(values, f"{where}.task_overrides.{task}") for task, values in overrides.items()}
    return {task: {KEYS[k]: v for k, v in {**glob, **per_task.get(task, {})}.items()}
            for task in dict.fromkeys([*tasks, *per_task])}


def protocol_settings(name: str, tasks: tuple[str, ...] = OFFICIAL_TASKS) -> TaskSettings:
    """The settings of a named protocol (see PROTOCOLS)."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown fine-tuning protocol {name!r}; known: {sorted(PROTOCOLS)} or a config.yaml path")
    return settings_from_hparams(PROTOCOLS[name], tasks, where=f"protocol {name}")


def read_config(path: str | pathlib.Path, tasks: tuple[str, ...] = OFFICIAL_TASKS) -> TaskSettings:
    """Per-task settings from an official `config.yaml` (its `finetune_hparams`; the pipeline's defaults without one)."""
    import yaml

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fine-tuning config {path} does not exist")
    try:
        config = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(config, Mapping):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return settings_from_hparams(config.get("finetune_hparams") or {}, tasks, where=f"{path}: finetune_hparams")


def load(protocol: str, tasks: tuple[str, ...] = OFFICIAL_TASKS) -> TaskSettings:
    """The settings of a protocol name (PROTOCOLS) or of an official config.yaml at that path."""
    if protocol in PROTOCOLS:
        return protocol_settings(protocol, tasks)
    if not protocol.endswith((".yaml", ".yml")):
        raise ValueError(f"fine-tuning protocol {protocol!r}: use one of {sorted(PROTOCOLS)} or the path of a config.yaml")
    return read_config(protocol, tasks)


def hparams_from_settings(settings: TaskSettings) -> dict[str, Any]:
    """`finetune_hparams` that reproduces `settings`: the values most tasks share, each task's differences as overrides."""
    tasks = list(settings)
    glob = {}
    for field, key in _FIELDS.items():
        values = [settings[t][field] for t in tasks if field in settings[t]]
        glob[key] = max(values, key=values.count) if values else PIPELINE_DEFAULTS.get(key, 0)
    overrides = {}
    for task in tasks:
        differ = {_FIELDS[f]: v for f, v in settings[task].items() if f in _FIELDS and v != glob[_FIELDS[f]]}
        overrides[task] = {k: settings[task].get(KEYS[k], glob[k]) for k in ("lr", "batch_size", "max_epochs")} | differ
    if not glob["train_examples"] and not any("train_examples" in o for o in overrides.values()):
        del glob["train_examples"]  # the whole splits: the official pipeline's only way
    return {**glob, "task_overrides": overrides}


def config_text(settings: TaskSettings, model_path: str = "path/to/exported/model", backend: str = "causal",
                eval_dir: str = "evaluation_data") -> str:
    """A config.yaml in the upstream format that makes the official pipeline fine-tune with `settings`."""
    import yaml

    config = {
        "models": [{"path": model_path, "backend": backend}],
        "tasks": {"zero_shot": list(official_tasks("zero_shot")), "cogbench": list(official_tasks("fmri")),
                  "finetune": [t for t in settings if t in OFFICIAL_TASKS]},
        "eval_dir": eval_dir,
        "results_dir": "results",
        "save_item_with_unk": True,
        "finetune_hparams": hparams_from_settings({t: s for t, s in settings.items() if t in OFFICIAL_TASKS}),
    }
    header = ("# Chinese BabyLM evaluation pipeline config, written by babylm_jax.evaluate: the fine-tuning\n"
              "# settings below are the ones this evaluation used. Set models[0].path to the uploaded model.\n")
    if "train_examples" in str(config["finetune_hparams"]):
        header += "# train_examples is babylm_jax's own key: the official pipeline ignores it and trains on every example.\n"
    return header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def write_config(path: str | pathlib.Path, settings: TaskSettings, **kwargs: Any) -> pathlib.Path:
    """Writes `config_text(settings, ...)` atomically; returns the path."""
    path = pathlib.Path(path)
    atomic_write_text(path, config_text(settings, **kwargs))
    return path
