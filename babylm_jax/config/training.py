"""The `train.*`, `checkpoint.*`, `mesh.*` and `distributed.*` settings, typed, with their rules.

configs/base.py holds every key and its default; a key here without a default must be given.
Rules that need the devices (the mesh's size) are checked where the mesh is made
(`training.sharding`); every other rule is checked here, before any work.
"""
from __future__ import annotations

import dataclasses

from babylm_jax.config.typed import Rule, at_least
from babylm_jax.core.families import family_spec
from babylm_jax.core.writers import WANDB_MODES, WRITERS

SCHEDULES = ("cosine", "wsd")  # train.schedule
OPTIMIZERS = ("adamw", "lamb")  # train.optimizer
RNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")  # train.rng_impl: jax.random's implementations
LOGITS_DTYPES = ("float32", "bfloat16")  # train.loss_logits_dtype
MESH_TARGETS = ("", "cuda", "tpu")  # mesh.target: "" = any backend
BATCH_AXES = ("data", "fsdp")  # the mesh's axes (training.sharding): the batch splits over both, params over fsdp
AUX_HEADS = ("syllable", "tone", "initial", "final", "radical")  # train.aux_heads.<head>: a character's ...
AUX_POSITIONS = ("auto", "target", "input")  # train.aux_heads.position: per family (auto), the LM's target token, or the input's own


@dataclasses.dataclass(frozen=True)
class AuxHeadsSettings:
    """`train.aux_heads.*`: a loss weight per auxiliary character head (0 = none), and where they predict.

    Training only: model.aux_heads builds the heads, corpus.hanzi_labels their labels."""

    syllable: float = 0.0
    tone: float = 0.0
    initial: float = 0.0
    final: float = 0.0
    radical: float = 0.0
    position: str = "auto"

    def rules(self) -> list[Rule]:
        return [*((head, getattr(self, head) >= 0, "a loss weight must be a number >= 0") for head in AUX_HEADS),
                ("position", self.position in AUX_POSITIONS, f"must be one of {AUX_POSITIONS}")]

    def position_for(self, family: str) -> str:
        """Where the heads predict for a model of `family`: "auto" is the family's (core.families)."""
        return family_spec(family).aux_position if self.position == "auto" else self.position


@dataclasses.dataclass(frozen=True)
class TensorBoardConfig:
    """`train.tensorboard.*` (train.writers "tensorboard")."""

    logdir: str  # "" = <workdir>/tensorboard


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    """`train.wandb.*` (train.writers "wandb")."""

    project: str
    entity: str
    name: str
    group: str
    tags: tuple[str, ...]
    mode: str

    def rules(self) -> list[Rule]:
        return [("mode", self.mode in WANDB_MODES, f"must be one of {WANDB_MODES}")]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`train.*`: the optimisation, its schedule and curricula, logging and in-run evaluation."""

    num_steps: int
    batch_size: int  # global, over all devices and processes
    seq_len: int
    learning_rate: float
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    b1: float
    b2: float
    grad_clip: float
    seed: int
    log_every_steps: int
    eval_every_steps: int
    eval_batches: int
    eval_tasks: str
    eval_task_items: int
    eval_data_dir: str
    optimizer: str
    schedule: str
    decay_share: float
    grad_accum_steps: int
    ema_decay: float
    z_loss: float
    mask_rate: float
    mask_rate_final: float
    hybrid_causal_share: float
    seq_len_curriculum: tuple[tuple[float, int], ...]
    allow_schedule_change: bool
    loss_chunk: int  # rows per chunk of the loss; 0 = per backend (model.objectives.loss_chunk)
    aux_heads: AuxHeadsSettings
    writers: tuple[str, ...]
    tensorboard: TensorBoardConfig
    wandb: WandbConfig
    # GPU: bit-exact runs and resumes with XLA's deterministic ops (core.platforms), at a cost in
    # speed; CPU runs are bit-exact without it (a no-op there).
    deterministic: bool = False
    # a loss chunk's stored logits, accumulated and reduced in float32 either way; "bfloat16" halves the
    # HBM passes over a GPU chunk's logits, which do not stay in its cache
    loss_logits_dtype: str = "float32"
    # the train step's random bits (dropout, masking): "threefry2x32" (the same bits on every backend) or
    # XLA's RngBitGenerator, "rbg" / "unsafe_rbg" (cheaper on GPUs and TPUs; the bits differ by backend and sharding)
    rng_impl: str = "threefry2x32"

    def rules(self) -> list[Rule]:
        shares = ("decay_share", "hybrid_causal_share")
        rates = ("ema_decay", "mask_rate", "mask_rate_final")
        return [
            *at_least(self, num_steps=1, batch_size=1, seq_len=2, warmup_steps=0, grad_accum_steps=1,
                      log_every_steps=1, eval_every_steps=1, eval_batches=1, weight_decay=0, z_loss=0, loss_chunk=0),
            ("writers", set(self.writers) <= set(WRITERS), f"must name writers of {WRITERS}"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "must be in [0, 1]"),
            ("b1", 0 <= self.b1 < 1, "must be in [0, 1)"),
            ("b2", 0 <= self.b2 < 1, "must be in [0, 1)"),
            ("grad_clip", self.grad_clip > 0, "must be > 0"),
            ("learning_rate", self.learning_rate > 0, "must be > 0"),
            ("optimizer", self.optimizer in OPTIMIZERS, f"must be one of {OPTIMIZERS}"),
            ("schedule", self.schedule in SCHEDULES, f"must be one of {SCHEDULES}"),
            ("rng_impl", self.rng_impl in RNG_IMPLS, f"must be one of {RNG_IMPLS}"),
            ("loss_logits_dtype", self.loss_logits_dtype in LOGITS_DTYPES, f"must be one of {LOGITS_DTYPES}"),
            *((key, 0 <= getattr(self, key) <= 1, "must be in [0, 1]") for key in shares),
            *((key, 0 <= getattr(self, key) < 1, "must be in [0, 1)") for key in rates),
            ("seq_len_curriculum", all(0 <= share < 1 and length >= 2 for share, length in self.seq_len_curriculum),
             "must be ((start_share in [0, 1), seq_len >= 2), ...)"),
        ]


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """`checkpoint.*`: rolling checkpoints and word-milestone ones."""

    every_steps: int
    max_to_keep: int
    word_milestones: bool
    milestone_unit: int  # words per unit (BabyLM: 1M)

    def rules(self) -> list[Rule]:
        return at_least(self, every_steps=1, max_to_keep=1, milestone_unit=1)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """`mesh.*`: which devices, split how."""

    num_devices: int  # single-process runs: the first N devices; 0 = all
    fsdp: int  # devices per FSDP group
    target: str  # the accelerator a recipe is made for: "" (any), "cuda" or "tpu" (training.backend)
    topology: str  # what `python -m babylm_jax.aot` compiles for: a TPU topology ("v5e:2x2") or GPU ("h100")

    def rules(self) -> list[Rule]:
        return [*at_least(self, num_devices=0, fsdp=1),
                ("target", self.target in MESH_TARGETS, f"must be one of {MESH_TARGETS}")]


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """`distributed.*`: multi-host runs."""

    initialize: bool
    coordinator_address: str
    num_processes: int
    process_id: int

    def rules(self) -> list[Rule]:
        return [("num_processes", self.num_processes >= 1, "must be >= 1"),
                ("process_id", 0 <= self.process_id < self.num_processes, "must be in [0, num_processes)")]
