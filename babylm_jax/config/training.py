"""The `train.*`, `checkpoint.*`, `mesh.*` and `distributed.*` settings, typed, with their rules.

Each field holds its key's type, default and meaning; `rules()` the rules on their values.
Rules that need the devices (the mesh's size) are checked where the mesh is made
(`training.sharding`); every other rule is checked here, before any work.
"""
from __future__ import annotations

import dataclasses

from babylm_jax.config.typed import Rule, at_least, optional
from babylm_jax.core.families import family_spec
from babylm_jax.core.writers import WANDB_MODES, WRITERS

SCHEDULES = ("cosine", "wsd")  # train.schedule
OPTIMIZERS = ("adamw", "lamb")  # train.optimizer
RNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")  # train.rng_impl: jax.random's implementations
LOGITS_DTYPES = ("float32", "bfloat16")  # train.loss_logits_dtype
LOSS_KERNELS = ("xla", "blockwise", "pallas")  # train.loss_kernel: model.loss.projected_loss
MESH_TARGETS = ("", "cuda", "tpu")  # mesh.target: "" = any backend
BATCH_AXES = ("data", "fsdp")  # the mesh's axes (training.sharding): the batch splits over both, params over fsdp
AUX_HEADS = ("syllable", "tone", "initial", "final", "radical")  # train.aux_heads.<head>: a character's ...
AUX_POSITIONS = ("auto", "target", "input")  # train.aux_heads.position: per family (auto), the LM's target token, or the input's own


@dataclasses.dataclass(frozen=True)
class AuxHeadsSettings:
    """`train.aux_heads.*`: a loss weight per auxiliary character head (0 = none), and where they predict.

    Training only, never exported: model.aux_heads builds the heads, corpus.hanzi_labels their labels,
    per token from its hanzi (pypinyin's default reading, cnradical's radical); other tokens are ignored."""

    syllable: float = optional(0.0)  # syllable with tone (1,379 classes)
    tone: float = optional(0.0)
    initial: float = optional(0.0)
    final: float = optional(0.0)
    radical: float = optional(0.0)
    # "target" (the token the LM loss predicts there), "input" (its own token) or "auto": input for causal
    # (measured better: experiments/README.md, "auxiliary heads, radicals as tokens"), target for mlm/hybrid
    position: str = optional("auto")

    def rules(self) -> list[Rule]:
        return [*((head, getattr(self, head) >= 0, "a loss weight must be a number >= 0") for head in AUX_HEADS),
                ("position", self.position in AUX_POSITIONS, f"must be one of {AUX_POSITIONS}")]

    def position_for(self, family: str) -> str:
        """Where the heads predict for a model of `family`: "auto" is the family's (core.families)."""
        return family_spec(family).aux_position if self.position == "auto" else self.position


@dataclasses.dataclass(frozen=True)
class TensorBoardConfig:
    """`train.tensorboard.*` (train.writers "tensorboard")."""

    logdir: str = ""  # "" = <workdir>/tensorboard (a folder of this run's own)


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    """`train.wandb.*` (train.writers "wandb")."""

    project: str = "babylm_jax"
    entity: str = ""  # "" = your default entity
    name: str = ""  # "" = the workdir's name
    group: str = ""
    tags: tuple[str, ...] = ()
    mode: str = "online"  # "online", "offline" (sync later: wandb sync) or "disabled"

    def rules(self) -> list[Rule]:
        return [("mode", self.mode in WANDB_MODES, f"must be one of {WANDB_MODES}")]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`train.*`: the optimisation, its schedule and curricula, logging and in-run evaluation."""

    num_steps: int = 4800  # the character recipe (config.schema); configs/base.py's words: 4,167, the same compute
    batch_size: int = 16  # global, over all devices and processes
    seq_len: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1  # on matmul kernels only (model.transformer.weight_decay_mask)
    b1: float = 0.9
    b2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    log_every_steps: int = 20
    eval_every_steps: int = 100
    eval_batches: int = 8
    # Task curves: a paradigm-balanced sample of each minimal-pair task, scored at every eval
    # and word milestone (metrics.jsonl "task/<name>", learning_curves.png); "" = off.
    eval_tasks: str = "zhoblimp"
    eval_task_items: int = 1180  # per task: 10 items from each of ZhoBLiMP's 118 paradigms
    eval_data_dir: str = ""  # the tasks' data directory; "" = $BABYLM_DATA_DIR (else curves are off)
    # Samples at every eval: each prompt's greedy continuation (causal, hybrid runs) in samples.jsonl,
    # TensorBoard's text tab and W&B; () = off
    sample_prompts: tuple[str, ...] = ("今天天气", "我们一起去", "他说", "北京是中国的")
    sample_max_new_tokens: int = 32  # new tokens at most per sample (and half of model.max_len at most)
    optimizer: str = "adamw"  # "adamw" or "lamb"
    schedule: str = "cosine"  # "cosine" or "wsd" (warmup-stable-decay)
    decay_share: float = 0.2  # "wsd": share of steps in the final decay
    grad_accum_steps: int = 1  # passes a step's batch is split into; the gradient is the whole batch's (base.py: 2)
    ema_decay: float = 0.0  # > 0 keeps EMA params, used for eval and export
    z_loss: float = 0.0
    mask_rate: float = 0.15  # mlm/hybrid: masking rate at the start ...
    mask_rate_final: float = 0.15  # ... and at the end (linear curriculum)
    hybrid_causal_share: float = 0.0625  # hybrid: share of rows trained causally (1:15)
    # ((start_share, seq_len), ...): rows split to shorter lengths
    seq_len_curriculum: tuple[tuple[float, int], ...] = ()
    allow_schedule_change: bool = False  # resuming with other num_steps, warmup, schedule, lr, ...: refused unless True
    # rows per chunk of the loss; 0 = per backend (model.loss.loss_chunk: CPU 256; GPU/TPU ~256 MB of f32 logits)
    loss_chunk: int = 0
    aux_heads: AuxHeadsSettings = AuxHeadsSettings()
    # Where metrics go besides metrics.jsonl (always written): "tensorboard" (pip install -e
    # ".[tensorboard]"; then `tensorboard --logdir runs/`) and/or "wandb" (".[wandb]").
    writers: tuple[str, ...] = ("jsonl",)
    tensorboard: TensorBoardConfig = TensorBoardConfig()
    wandb: WandbConfig = WandbConfig()
    # GPU: bit-exact runs and resumes with XLA's deterministic ops (core.platforms; slower, `train` says by
    # how much); CPU runs are bit-exact without it (a no-op there).
    deterministic: bool = optional(False)
    # a loss chunk's stored logits, accumulated and reduced in float32 either way; "bfloat16" halves the
    # HBM passes over a GPU chunk's logits, which do not stay in its cache; the auxiliary heads' logits too
    loss_logits_dtype: str = optional("float32")
    # the train step's random bits (dropout, masking): "threefry2x32" (the same bits on every backend) or
    # XLA's RngBitGenerator, "rbg" / "unsafe_rbg" (cheaper on GPUs and TPUs; the bits differ by backend and sharding)
    rng_impl: str = optional("threefry2x32")
    # the loss over the vocabulary (model.loss): "xla" (row chunks, `loss_chunk`), "blockwise" (vocabulary
    # blocks in plain XLA) or "pallas" (fused kernels that never write the logits: Triton on GPU, interpret
    # mode on CPU, not on TPU); the same loss and gradients within bf16 rounding
    loss_kernel: str = optional("xla")

    def rules(self) -> list[Rule]:
        shares = ("decay_share", "hybrid_causal_share")
        rates = ("ema_decay", "mask_rate", "mask_rate_final")
        return [
            *at_least(self, num_steps=1, batch_size=1, seq_len=2, warmup_steps=0, grad_accum_steps=1,
                      log_every_steps=1, eval_every_steps=1, eval_batches=1,
                      sample_max_new_tokens=1, weight_decay=0, z_loss=0, loss_chunk=0),
            ("writers", set(self.writers) <= set(WRITERS), f"must name writers of {WRITERS}"),
            ("sample_prompts", all(isinstance(p, str) and p.strip() for p in self.sample_prompts),
             "must be non-empty strings (() = off)"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "must be in [0, 1]"),
            ("b1", 0 <= self.b1 < 1, "must be in [0, 1)"),
            ("b2", 0 <= self.b2 < 1, "must be in [0, 1)"),
            ("grad_clip", self.grad_clip > 0, "must be > 0"),
            ("learning_rate", self.learning_rate > 0, "must be > 0"),
            ("seed", 0 <= self.seed < 2**32, "must be in [0, 2**32): the data order's shuffle takes no other"),
            ("optimizer", self.optimizer in OPTIMIZERS, f"must be one of {OPTIMIZERS}"),
            ("schedule", self.schedule in SCHEDULES, f"must be one of {SCHEDULES}"),
            ("rng_impl", self.rng_impl in RNG_IMPLS, f"must be one of {RNG_IMPLS}"),
            ("loss_logits_dtype", self.loss_logits_dtype in LOGITS_DTYPES, f"must be one of {LOGITS_DTYPES}"),
            ("loss_kernel", self.loss_kernel in LOSS_KERNELS, f"must be one of {LOSS_KERNELS}"),
            *((key, 0 <= getattr(self, key) <= 1, "must be in [0, 1]") for key in shares),
            *((key, 0 <= getattr(self, key) < 1, "must be in [0, 1)") for key in rates),
            ("seq_len_curriculum", all(0 <= share < 1 and length >= 2 for share, length in self.seq_len_curriculum),
             "must be ((start_share in [0, 1), seq_len >= 2), ...)"),
        ]


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """`checkpoint.*`: rolling checkpoints and word-milestone ones."""

    every_steps: int = 100
    max_to_keep: int = 2
    word_milestones: bool = True  # extra checkpoints at 1, 2, ..., 10, 20, ..., 100 units
    milestone_unit: int = 1_000_000  # words per unit (BabyLM: 1M)

    def rules(self) -> list[Rule]:
        return at_least(self, every_steps=1, max_to_keep=1, milestone_unit=1)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """`mesh.*`: which devices, split how."""

    num_devices: int = 0  # single-process runs: the first N devices; 0 = all
    fsdp: int = 1  # devices per FSDP group; 1 = pure data parallel
    # the accelerator a recipe is made for: "" (any), "cuda" or "tpu" (then train refuses a CPU backend
    # without --allow_cpu; training.devices)
    target: str = ""
    # what `python -m babylm_jax.aot` compiles for: a TPU topology ("v5e:2x2") or GPU ("h100", "h200")
    topology: str = ""

    def rules(self) -> list[Rule]:
        return [*at_least(self, num_devices=0, fsdp=1),
                ("target", self.target in MESH_TARGETS, f"must be one of {MESH_TARGETS}")]


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """`distributed.*`: multi-host runs."""

    initialize: bool = False  # call jax.distributed.initialize() (multi-host)
    coordinator_address: str = ""  # empty: auto-detect (TPU pods, SLURM, ...)
    num_processes: int = 1
    process_id: int = 0

    def rules(self) -> list[Rule]:
        return [("num_processes", self.num_processes >= 1, "must be >= 1"),
                ("process_id", 0 <= self.process_id < self.num_processes, "must be in [0, num_processes)")]
