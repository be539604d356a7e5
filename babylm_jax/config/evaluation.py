"""Typed evaluation settings per track, built from the evaluation config (`configs/eval.py`).

`EvalSettings.from_config(config, limit)` checks every key before any model is loaded, and
`check_model` checks what depends on the model (fine-tuning max_len, fMRI layers) before
any task runs; an error names the config key and the fix, e.g.
`config key finetune.tasks.c3.epochs=0: must be >= 1`.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Iterable, Mapping

import ml_collections

from babylm_jax.config import eval_defaults
from babylm_jax.config.files import load_config_file
from babylm_jax.config.typed import Rule, build
from babylm_jax.config import finetune_protocols as protocols
from babylm_jax.config.model import ModelConfig
from babylm_jax.tasks.formats import COGBENCH_ROIS
from babylm_jax.tasks.registry import task_names

RIDGE_FORMS = ("auto", "primal", "dual", "svd")  # fmri.*.ridge_form (eval.fmri.ridge)
DEFAULT_CONFIG = pathlib.Path(eval_defaults.__file__)  # the one home of the values, shipped in the package


@dataclasses.dataclass(frozen=True)
class ScoringSettings:
    """Minimal pairs: the sentence-scoring kernels."""

    batch_size: int  # rows per scoring batch
    row_len: int  # packed row length
    within_word_l2r: bool  # PLL variant of Kauf & Ivanova (2023); mlm/hybrid only

    def rules(self) -> list[Rule]:
        return [("batch_size", self.batch_size >= 1, "must be >= 1"),
                ("row_len", self.row_len >= 2, "must be >= 2 (tokens per packed row)")]


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
    """One fine-tuning task's protocol (the official one unless overridden)."""

    learning_rate: float
    batch_size: int
    epochs: int
    max_len: int
    warmup_ratio: float
    min_lr_ratio: float  # the cosine's floor, a share of the peak
    weight_decay: float
    max_grad_norm: float  # 0 = no clipping
    head_dropout: float
    seed: int
    train_examples: int  # 0 = all; else a fixed, evenly spaced subset of the training split
    rows_multiple: int  # packed training rows per step rounded up to a multiple of this
    eval_rows: int  # packed rows per evaluation batch
    progress: bool
    limit: int | None = None  # keep N evenly spaced examples of each split (`--limit`)

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
                ("train_examples", self.train_examples >= 0, "must be >= 0 (0 = the whole split)"),
                ("rows_multiple", self.rows_multiple >= 1, "must be >= 1"),
                ("eval_rows", self.eval_rows >= 1, "must be >= 1")]


@dataclasses.dataclass(frozen=True)
class RidgeSettings:
    """What both fMRI tasks set: the ridge grid and route, and the layer sweep."""

    alpha_logspace: tuple[float, float, int]  # np.logspace(low, high, count) alphas
    fit_intercept: bool
    alpha_per_voxel: bool
    layers: tuple[int, ...] | None  # the layer sweep; None = every layer
    ridge_form: str
    voxel_chunk: int

    def rules(self) -> list[Rule]:
        low, high, count = (tuple(self.alpha_logspace) + (0, 0, 0))[:3]
        return [("alpha_logspace", len(self.alpha_logspace) == 3 and low <= high and int(count) >= 1,
                 "must be (low, high, count) with low <= high and count >= 1"),
                ("ridge_form", self.ridge_form in RIDGE_FORMS, f"must be one of {RIDGE_FORMS}"),
                ("voxel_chunk", self.voxel_chunk >= 1, "must be >= 1")]


@dataclasses.dataclass(frozen=True)
class WordFmriSettings(RidgeSettings):
    """word_fmri: ridge from isolated-word features to word responses (see eval/fmri/encoding.py)."""

    top_fraction: float
    standardize_rows: bool

    def rules(self) -> list[Rule]:
        return [("top_fraction", 0 < self.top_fraction <= 1, "must be in (0, 1]"), *super().rules()]


@dataclasses.dataclass(frozen=True)
class FmriSettings(RidgeSettings):
    """fmri (discourse): ridge from in-context word features, HRF-convolved, to TR responses."""

    penalty_power: float
    rois: tuple[str, ...]
    context: str
    tr: float
    oversampling: int
    grid_hz: int
    skip_trs: int
    hrf_length_s: float
    include_last_word: bool
    feature_zscore: str
    rcond: float
    correlation_ddof: int

    def rules(self) -> list[Rule]:
        return [("rois", set(self.rois) <= set(COGBENCH_ROIS) and bool(self.rois),
                 f"must name regions of {COGBENCH_ROIS} (() = all)"),
                ("context", self.context in ("sentence", "story"), "must be 'sentence' or 'story'"),
                ("rcond", self.rcond >= 0, "must be >= 0"),
                ("correlation_ddof", self.correlation_ddof in (0, 1), "must be 0 or 1"),
                ("feature_zscore", self.feature_zscore in ("matrix", "column"), "must be 'matrix' or 'column'"),
                ("tr", self.tr > 0, "must be > 0"),
                ("oversampling", self.oversampling >= 1 and abs(self.oversampling / self.tr - self.grid_hz) < 1e-6,
                 "oversampling / tr must equal grid_hz (the HRF and the word grid share one rate)"),
                ("skip_trs", self.skip_trs >= 0, "must be >= 0"),
                ("hrf_length_s", self.hrf_length_s > 0, "must be > 0"),
                *super().rules()]


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """Everything the task runners read, per track."""

    scoring: ScoringSettings
    finetune: Mapping[str, FinetuneOptions]  # task -> its protocol (task overrides applied)
    fmri_layer: int  # hidden state reported in results.json (0 = embeddings, -1 = the last)
    word_fmri: WordFmriSettings
    fmri: FmriSettings
    limit: int | None = None  # minimal pairs: the first N items; fine-tuning: N examples per split
    finetune_protocol: str = ""  # config key finetune.protocol: "", a protocol name or a config.yaml path
    log_to_run: bool = False  # results also into the run's TensorBoard folder / W&B run (eval.run_log)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, limit: int | None = None) -> "EvalSettings":
        """Builds and checks the settings; ValueError names the first bad config key."""
        if limit is not None and limit <= 0:
            raise ValueError(f"--limit={limit}: must be a positive number of items (or left out for all)")
        sections = _sections(config, ("scoring", "finetune", "fmri", "log_to_run"), "")
        if not isinstance(sections["log_to_run"], bool):
            raise ValueError(f"config key log_to_run={sections['log_to_run']!r}: must be True or False")
        fmri = _sections(sections["fmri"], ("layer", "word_fmri", "fmri"), "fmri.")
        if not isinstance(fmri["layer"], int):
            raise ValueError(f"config key fmri.layer={fmri['layer']!r}: must be an integer hidden-state index")
        return cls(
            scoring=build(ScoringSettings, sections["scoring"], "scoring."),
            finetune=finetune_options(sections["finetune"], limit),
            fmri_layer=fmri["layer"],
            word_fmri=build(WordFmriSettings, _fmri_values(fmri["word_fmri"], "fmri.word_fmri."), "fmri.word_fmri."),
            fmri=build(FmriSettings, _fmri_values(fmri["fmri"], "fmri.fmri."), "fmri.fmri."),
            limit=limit,
            finetune_protocol=str(sections["finetune"].get("protocol") or ""),
            log_to_run=sections["log_to_run"],
        )

    def check_model(self, model: ModelConfig, tasks: Iterable[str]) -> None:
        """Refuses settings the model cannot run for `tasks` (names), naming the key that fixes it."""
        tasks = set(tasks)
        for task in sorted(tasks):
            if task in self.finetune and self.finetune[task].max_len > model.max_len:
                raise ValueError(
                    f"config key finetune.max_len (or finetune.tasks.{task}.max_len)="
                    f"{self.finetune[task].max_len} is longer than the model's max_len={model.max_len}; "
                    f"set it to at most {model.max_len}")
        hidden_states = model.num_layers + 1
        wanted = {"fmri.layer": (self.fmri_layer,) if tasks & {"word_fmri", "fmri"} else (),
                  "fmri.word_fmri.layers": (self.word_fmri.layers or ()) if "word_fmri" in tasks else (),
                  "fmri.fmri.layers": (self.fmri.layers or ()) if "fmri" in tasks else ()}
        for key, layers in wanted.items():
            for layer in layers:
                if not -hidden_states <= layer < hidden_states:
                    raise ValueError(f"config key {key}: layer {layer} is out of range for the model's "
                                     f"{hidden_states} hidden states (0..{model.num_layers}, or negative from the end)")


def default_settings(limit: int | None = None) -> EvalSettings:
    """The settings of `DEFAULT_CONFIG` (configs/eval.py), without overrides."""
    return EvalSettings.from_config(load_config_file(DEFAULT_CONFIG), limit)


def _sections(config: Mapping[str, Any], names: tuple[str, ...], prefix: str) -> dict[str, Any]:
    keys = set(config.keys())
    unknown, missing = sorted(keys - set(names)), sorted(set(names) - keys)
    if unknown or missing:
        raise ValueError(f"evaluation config: unknown key(s) {[prefix + k for k in unknown]}, missing key(s) "
                         f"{[prefix + k for k in missing]} (compare with configs/eval.py)")
    return {name: config[name] for name in names}


def finetune_options(finetune: Mapping[str, Any], limit: int | None = None) -> dict[str, FinetuneOptions]:
    """Per task: the global `finetune.<key>` values with `finetune.tasks.<task>.<key>` (when set) over them.

    `finetune.protocol` ("official", "eval_finetuning_sh" or an official config.yaml's path;
    "" = none) then sets each task's learning rate, batch size, epochs, length and seed, as
    that protocol merges them (`config.finetune_protocols`), over both.
    """
    protocol = finetune.get("protocol") or ""
    common = {k: v for k, v in dict(finetune).items() if k not in ("tasks", "protocol")}
    per_task, names = dict(finetune.get("tasks") or {}), task_names("finetune")
    unknown = sorted(set(per_task) - set(names))
    if unknown:
        raise ValueError(f"config key finetune.tasks.{unknown[0]}: not a fine-tuning task; known: {list(names)}")
    options = {}
    for task in names:
        overrides = {k: v for k, v in dict(per_task.get(task) or {}).items() if v is not None}
        options[task] = build(FinetuneOptions, {**common, **overrides}, "finetune.", {"limit": limit},
                              {k: f"finetune.tasks.{task}." for k in overrides})
    if protocol:
        try:
            chosen = protocols.load(str(protocol), names)
        except (OSError, ValueError) as error:
            raise ValueError(f"config key finetune.protocol={protocol!r}: {error}") from None
        for task, values in chosen.items():
            options[task] = build(FinetuneOptions, {**dataclasses.asdict(options[task]), **values}, "finetune.",
                                  prefixes={k: f"finetune.protocol ({protocol}) " for k in values})
    return options


def _fmri_values(section: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The section's values with `layers` ("all" or "0,2,-1") as a tuple (None = all) and () rois as all."""
    values = dict(section)
    layers = values.get("layers", "all")
    if isinstance(layers, str):
        try:
            values["layers"] = None if layers.strip() == "all" else tuple(int(x) for x in layers.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"config key {prefix}layers={layers!r}: use 'all' or comma-separated layer indices, "
                             "e.g. '0,2,-1'") from None
    if "rois" in values and not values["rois"]:
        values["rois"] = COGBENCH_ROIS
    return values
