"""The evaluation config: each key's default on its field, and the typed settings per track built from it.

    config = default_config()                        # every key at its field's default (configs/eval.py)
    settings = EvalSettings.from_config(config, limit)

This module is also evaluate's default `--config` file (`DEFAULT_CONFIG`: its `get_config()`),
shipped in the package. `EvalSettings.from_config(config, limit)` checks every key before any model is loaded, and
`check_model` checks what depends on the model (fine-tuning max_len, fMRI layers) before
any task runs; an error names the config key and the fix, e.g.
`config key finetune.tasks.c3.epochs=0: must be >= 1`.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Iterable, Mapping

import ml_collections
from ml_collections.config_dict import placeholder

from babylm_jax.config.typed import Rule, build
from babylm_jax.config import finetune_protocols as protocols
from babylm_jax.config.finetune_protocols import OFFICIAL_TASK_FINETUNE, FinetuneOptions
from babylm_jax.config.model import ModelConfig
from babylm_jax.tasks.formats import COGBENCH_ROIS
from babylm_jax.tasks.registry import task_names

RIDGE_FORMS = ("auto", "primal", "dual", "svd")  # fmri.*.ridge_form (eval.fmri.ridge)
DEFAULT_CONFIG = pathlib.Path(__file__)  # this file: evaluate's default --config (`get_config()` below)


@dataclasses.dataclass(frozen=True)
class ScoringSettings:
    """`scoring.*`: minimal pairs (zhoblimp, xcomps_zh, hanzi_*), the sentence log-likelihood kernels."""

    batch_size: int = 256  # rows per scoring batch: 8192 tokens at row_len 32
    row_len: int = 32  # packed row length (short rows waste less attention)
    within_word_l2r: bool = False  # PLL variant of Kauf & Ivanova (2023); mlm/hybrid only

    def rules(self) -> list[Rule]:
        return [("batch_size", self.batch_size >= 1, "must be >= 1"),
                ("row_len", self.row_len >= 2, "must be >= 2 (tokens per packed row)")]


@dataclasses.dataclass(frozen=True)
class RidgeSettings:
    """What both fMRI tasks set: the ridge grid and route, and the layer sweep (see eval/fmri/encoding.py).

    The defaults are the official discourse fMRI's (`fmri.fmri.*`); word_fmri sets three of its own."""

    alpha_logspace: tuple[float, float, int] = (-3.0, 3.0, 10)  # np.logspace(low, high, count) alphas
    fit_intercept: bool = False
    alpha_per_voxel: bool = False  # not official
    # the layer sweep; None = every layer (config: "all", or comma-separated indices, e.g. "0,2,-1")
    layers: tuple[int, ...] | None = None
    ridge_form: str = "svd"  # the official thin SVD; "primal"/"dual" are faster on CPU; "auto" picks
    voxel_chunk: int = 2048

    def rules(self) -> list[Rule]:
        low, high, count = (tuple(self.alpha_logspace) + (0, 0, 0))[:3]
        return [("alpha_logspace", len(self.alpha_logspace) == 3 and low <= high and int(count) >= 1,
                 "must be (low, high, count) with low <= high and count >= 1"),
                ("ridge_form", self.ridge_form in RIDGE_FORMS, f"must be one of {RIDGE_FORMS}"),
                ("voxel_chunk", self.voxel_chunk >= 1, "must be >= 1")]


@dataclasses.dataclass(frozen=True)
class WordFmriSettings(RidgeSettings):
    """`fmri.word_fmri.*`: ridge from isolated-word features to word responses (see eval/fmri/encoding.py)."""

    alpha_logspace: tuple[float, float, int] = (-4.0, 4.0, 10)
    fit_intercept: bool = True
    ridge_form: str = "auto"
    top_fraction: float = 0.1  # subject score: mean of the top 10% word correlations
    standardize_rows: bool = False  # the legacy no-split mode standardised rows

    def rules(self) -> list[Rule]:
        return [("top_fraction", 0 < self.top_fraction <= 1, "must be in (0, 1]"), *super().rules()]


@dataclasses.dataclass(frozen=True)
class FmriSettings(RidgeSettings):
    """`fmri.fmri.*` (discourse): ridge from in-context word features, HRF-convolved, to TR responses."""

    penalty_power: float = 2.0  # ridge penalty = alpha ** penalty_power (official: alpha^2)
    rois: tuple[str, ...] = COGBENCH_ROIS  # regions of interest (config: () = all six)
    context: str = "sentence"  # story words in context of their "sentence" (line) or whole "story"
    tr: float = 0.71  # seconds per TR
    oversampling: int = 71  # HRF samples per TR (oversampling / tr = grid_hz)
    grid_hz: int = 100  # word-onset grid
    skip_trs: int = 19  # TRs dropped at the start of each story
    hrf_length_s: float = 32.0
    include_last_word: bool = False  # officially the grid ends one frame early
    feature_zscore: str = "matrix"  # "matrix" (official) or "column"
    rcond: float = 0.0  # drop components below rcond x the largest (official: 0, s <= 1e-10)
    correlation_ddof: int = 1  # the official torch.std z-scores; 0 = plain Pearson r

    def rules(self) -> list[Rule]:
        return [("rois", set(self.rois) <= set(COGBENCH_ROIS) and bool(self.rois),
                 f"must name regions of {COGBENCH_ROIS} (() = all)"),
                ("context", self.context in ("sentence", "story"), "must be 'sentence' or 'story'"),
                ("rcond", self.rcond >= 0, "must be >= 0"),
                ("correlation_ddof", self.correlation_ddof in (0, 1), "must be 0 or 1"),
                ("feature_zscore", self.feature_zscore in ("matrix", "column"), "must be 'matrix' or 'column'"),
                ("tr", self.tr > 0, "must be > 0"),
                ("oversampling", self.oversampling >= 1 and self.tr > 0  # tr's own rule, above, says what it must be
                 and abs(self.oversampling / self.tr - self.grid_hz) < 1e-6,
                 "oversampling / tr must equal grid_hz (the HRF and the word grid share one rate)"),
                ("skip_trs", self.skip_trs >= 0, "must be >= 0"),
                ("hrf_length_s", self.hrf_length_s > 0, "must be > 0"),
                *super().rules()]


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """Everything the task runners read, per track; `default_config()` spells it as the config's keys."""

    scoring: ScoringSettings
    finetune: Mapping[str, FinetuneOptions]  # task -> its protocol (task overrides applied)
    fmri_layer: int = -1  # config key fmri.layer: hidden state reported in results.json (0 = embeddings, -1 = the last)
    word_fmri: WordFmriSettings = WordFmriSettings()
    fmri: FmriSettings = FmriSettings()
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


def default_config() -> ml_collections.ConfigDict:
    """Every key of the evaluation config at its field's default: what configs/eval.py starts from, and so
    every key a `--config.a.b=v` override can set.

    `finetune.<key>` holds one protocol for every task (`FinetuneOptions`: the official one), and
    `finetune.tasks.<task>.<key>` overrides it for one task (None = the global value), as the official
    config.yaml's finetune_hparams and task_overrides do. `finetune.protocol` names a protocol,
    "official", "quick" (babylm_jax's CPU check: 2 epochs over at most 3,000 training examples,
    cluewsc2020 6 over all 1,244; not comparable with official scores) or "eval_finetuning_sh" (the
    older script), or the path of an official pipeline config.yaml, whose values then set each task's
    learning_rate, batch_size, epochs, max_len and seed (config/finetune_protocols.py); "" = the keys
    above. The config.yaml that reproduces the settings used is written beside results.json either way.
    """
    fields = {field.name: field.default for field in dataclasses.fields(EvalSettings)}
    options = {key: value for key, value in dataclasses.asdict(FinetuneOptions()).items() if key != "limit"}
    config = ml_collections.ConfigDict({
        "log_to_run": fields["log_to_run"],
        "scoring": dataclasses.asdict(ScoringSettings()),
        "finetune": {**options, "protocol": fields["finetune_protocol"]},
        "fmri": {"layer": fields["fmri_layer"], "word_fmri": _config_spelling(fields["word_fmri"]),
                 "fmri": _config_spelling(fields["fmri"])},
    })
    config.finetune.tasks = ml_collections.ConfigDict()
    for task in task_names("finetune"):
        config.finetune.tasks[task] = ml_collections.ConfigDict(
            {key: placeholder(type(value)) for key, value in options.items()})
        config.finetune.tasks[task].update(OFFICIAL_TASK_FINETUNE.get(task, {}))
    return config


def get_config() -> ml_collections.ConfigDict:
    """`default_config()`: this module read as a config file, evaluate's default `--config` (`DEFAULT_CONFIG`)."""
    return default_config()


def default_settings(limit: int | None = None) -> EvalSettings:
    """The settings of `default_config()` (configs/eval.py), without overrides."""
    return EvalSettings.from_config(default_config(), limit)


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


def _config_spelling(settings: RidgeSettings) -> dict[str, Any]:
    """An fMRI section's values as the config spells them, `_fmri_values` backwards: layers None as "all",
    every region of interest as ()."""
    values = dataclasses.asdict(settings)
    values["layers"] = "all" if settings.layers is None else ",".join(map(str, settings.layers))
    if values.get("rois") == COGBENCH_ROIS:
        values["rois"] = ()
    return values


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
