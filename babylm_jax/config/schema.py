"""The one schema of a run's config, built and checked once at the entry point, before any work.

    config = default_config()             # every key at its field's default (configs/base.py starts here)
    run = RunConfig.from_config(config)   # every key of every group typed and checked
    run.data, run.model, run.train, ...   # each layer is handed its part
    run.to_dict()                         # the plain nested dict (config.json, checkpoints, writers)

A run's config file (configs/base.py and the recipes that start from it) holds the groups
below; `RunConfig.from_config` names the first unknown, missing, mistyped or invalid key,
and the rules across groups (sequence length against the model's, the batch against its
passes). Each key's default and meaning live on its dataclass field (config/data.py,
config/model.py, config/training.py).

The field defaults are one whole recipe, the character one: data.tokenizer.kind "char" with
6,000 ids, 4 layers of d 128, 4,800 steps of 16 x 128 tokens in one pass a step (the `char` arm of
experiments/README.md, "Words as tokens": ZhoBLiMP 0.649 / 0.638 over two seeds). configs/base.py
starts from them and switches to jieba words: kind "words", 8,000 ids, 4,167 steps at the same
99.4 TFLOP, two passes a step. The evaluation config's defaults (config/evaluation.py) are the
official pipeline's.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import ml_collections

from babylm_jax.config.data import DataConfig
from babylm_jax.config.model import ModelConfig
from babylm_jax.config.training import CheckpointConfig, DistributedConfig, MeshConfig, TrainConfig
from babylm_jax.config.typed import build
from babylm_jax.core.families import family_spec


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Every group of a training run's config, typed."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    mesh: MeshConfig = MeshConfig()
    distributed: DistributedConfig = DistributedConfig()

    @classmethod
    def from_config(cls, config: Any) -> "RunConfig":
        """The typed config of `config` (a ConfigDict, or a dict as saved in config.json, of the groups
        above); ValueError names the bad key."""
        groups = set(config.keys())
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown, missing = sorted(groups - set(fields)), sorted(set(fields) - groups)
        if unknown or missing:
            raise ValueError(f"config groups: unknown {unknown}, missing {missing}; a run's config has {fields}")
        run = cls(data=DataConfig.from_config(config["data"]), model=ModelConfig.from_config(config["model"]),
                  **{name: build(cls_, config[name], name + ".") for name, cls_ in (
                      ("train", TrainConfig), ("checkpoint", CheckpointConfig), ("mesh", MeshConfig),
                      ("distributed", DistributedConfig))})
        run.validate()
        return run

    def to_dict(self) -> dict[str, Any]:
        """Every key as plain JSON values (sequences as lists), in the shape of the config file."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def validate(self) -> None:
        """The rules across groups."""
        train, model = self.train, self.model
        for key, length in [("train.seq_len", train.seq_len), *(
                ("train.seq_len_curriculum", length) for _, length in train.seq_len_curriculum)]:
            if length > model.max_len:
                raise ValueError(f"config key {key}={length} exceeds model.max_len={model.max_len}")
        rows_per_pass = train.batch_size // train.grad_accum_steps
        if train.batch_size % train.grad_accum_steps:
            raise ValueError(f"config key train.batch_size={train.batch_size} must divide evenly over "
                             f"train.grad_accum_steps={train.grad_accum_steps}")
        if family_spec(model.family).causal_rows and train.hybrid_causal_share > 0 and not round(
                rows_per_pass * train.hybrid_causal_share):
            raise ValueError(
                f"config key train.hybrid_causal_share={train.hybrid_causal_share} of "
                f"{rows_per_pass} rows a pass (train.batch_size={train.batch_size} / "
                f"train.grad_accum_steps={train.grad_accum_steps}) rounds to no causal row: "
                "use fewer passes, more rows or a larger share")


def default_config() -> ml_collections.ConfigDict:
    """Every key of a run's config at its field's default, as a ConfigDict: what configs/base.py starts from,
    and so every key a `--config.a.b=v` override can set."""
    return ml_collections.ConfigDict(dataclasses.asdict(RunConfig()))
