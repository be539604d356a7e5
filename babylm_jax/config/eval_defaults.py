"""Evaluation settings, read by `python -m babylm_jax.evaluate` (this file is its default --config).

    python -m babylm_jax.evaluate --workdir runs/base --data_dir ../shared/data --tasks all
    python -m babylm_jax.evaluate ... --config.scoring.within_word_l2r=True --config.fmri.layer=2
    python -m babylm_jax.evaluate ... --limit 64 --config.finetune.epochs=1 \\
        --config.finetune.tasks.cluewsc2020.epochs=1                   # a quick run

Fine-tuning: `finetune.<key>` holds the official protocol for every task, and
`finetune.tasks.<task>.<key>` overrides it for one task (None = the global value), as the
official config.yaml's finetune_hparams and task_overrides do; `finetune.protocol` reads
such a config.yaml itself (`--config.finetune.protocol=path/config.yaml`). Every key below is read;
unknown keys are refused. Checked in `babylm_jax.config.evaluation` before any model is loaded.
"""
import ml_collections
from ml_collections.config_dict import placeholder

from babylm_jax.tasks.registry import task_names

# The official fine-tuning protocol (the pipeline's configs/config.yaml, finetune/trainer.py and utils.py): the one
# home of its values. `finetune.*` below starts from it, and config/finetune_protocols.py's "official" protocol (the
# config.yaml keys) is read from it.
OFFICIAL_FINETUNE = {
    "learning_rate": 3e-5,  # AdamW (b2 0.999, eps 1e-8)
    "batch_size": 32,  # examples a step; the last partial batch of an epoch is dropped, as officially
    "epochs": 10,
    "max_len": 128,  # tokens per input row, special tokens included
    "warmup_ratio": 0.06,  # linear warmup share of the steps, then cosine
    "min_lr_ratio": 0.1,  # the cosine ends at this share of the peak (the official min_factor)
    "weight_decay": 0.01,  # on every parameter, as torch.optim.AdamW over model.parameters()
    "max_grad_norm": 0.0,  # global-norm clipping; 0 = none (the official trainer clips nothing)
    "head_dropout": 0.1,
    "seed": 42,
}
OFFICIAL_TASK_FINETUNE = {"cluewsc2020": {"epochs": 30}}  # the official config.yaml's task_overrides


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()

    # True: the results also go to the run's TensorBoard folder and W&B run (train.writers), as
    # curves against the checkpoint step (and, with --milestones, against words seen).
    config.log_to_run = False

    # Minimal pairs (zhoblimp, xcomps_zh, hanzi_*): sentence log-likelihood kernels.
    config.scoring = ml_collections.ConfigDict()
    config.scoring.batch_size = 256  # rows per scoring batch: 8192 tokens at row_len 32
    config.scoring.row_len = 32  # packed row length (short rows waste less attention)
    config.scoring.within_word_l2r = False  # PLL variant of Kauf & Ivanova (2023); mlm/hybrid only

    # Fine-tuning (afqmc, ocnli, tnews, cluewsc2020, c3, diagnostic_nli): the official protocol.
    config.finetune = _finetune()

    # fMRI (word_fmri, fmri): ridge encoding models on hidden states; see babylm_jax/eval/fmri/encoding.py.
    config.fmri = _fmri()
    return config


def _finetune() -> ml_collections.ConfigDict:
    """`finetune.*`: the official protocol for every task, with per-task overrides."""
    finetune = ml_collections.ConfigDict(OFFICIAL_FINETUNE)  # the official protocol (above)
    finetune.train_examples = 0  # 0 = the whole training split; N = a fixed, evenly spaced N of it
    finetune.rows_multiple = 2  # packed training rows per step rounded up to a multiple (fewer compiles)
    finetune.eval_rows = 64  # packed rows of max_len tokens per evaluation batch
    finetune.progress = True  # a progress bar per task
    finetune.tasks = ml_collections.ConfigDict()
    for task in task_names("finetune"):
        finetune.tasks[task] = ml_collections.ConfigDict(
            {key: placeholder(type(value)) for key, value in finetune.items() if key != "tasks"})
    for task, values in OFFICIAL_TASK_FINETUNE.items():
        finetune.tasks[task].update(values)
    # A protocol by name, "official" (the values above), "quick" (babylm_jax's CPU check: 2 epochs over at
    # most 3,000 training examples, cluewsc2020 6 over all 1,244; full dev splits; not comparable with
    # official scores) or "eval_finetuning_sh" (the older script: batch 64, 5 epochs, cluewsc2020 5,
    # length 512), or the path of an official pipeline config.yaml: its
    # finetune_hparams and task_overrides then set each task's learning_rate, batch_size, epochs,
    # max_len and seed (over the keys above). "" = the keys above. The config.yaml that reproduces
    # the settings used is written beside results.json either way.
    finetune.protocol = ""
    return finetune


def _fmri() -> ml_collections.ConfigDict:
    """`fmri.*`: the reported layer, and the ridge and HRF choices per fMRI task."""
    fmri = ml_collections.ConfigDict()
    fmri.layer = -1  # hidden state reported in results.json (0 = embeddings, -1 = the last)
    fmri.word_fmri = ml_collections.ConfigDict()
    fmri.word_fmri.alpha_logspace = (-4.0, 4.0, 10)  # np.logspace(low, high, count) alphas
    fmri.word_fmri.fit_intercept = True
    fmri.word_fmri.alpha_per_voxel = False  # not official
    fmri.word_fmri.top_fraction = 0.1  # subject score: mean of the top 10% word correlations
    fmri.word_fmri.standardize_rows = False  # the legacy no-split mode standardised rows
    fmri.word_fmri.layers = "all"  # layer sweep: "all" or comma-separated indices, e.g. "0,2,-1"
    fmri.word_fmri.ridge_form = "auto"
    fmri.word_fmri.voxel_chunk = 2048
    fmri.fmri = ml_collections.ConfigDict()
    fmri.fmri.alpha_logspace = (-3.0, 3.0, 10)
    fmri.fmri.penalty_power = 2.0  # ridge penalty = alpha ** penalty_power (official: alpha^2)
    fmri.fmri.fit_intercept = False
    fmri.fmri.alpha_per_voxel = False  # not official
    fmri.fmri.rois = ()  # regions of interest; () = all six of babylm_jax.tasks.formats.COGBENCH_ROIS
    fmri.fmri.context = "sentence"  # story words in context of their "sentence" (line) or whole "story"
    fmri.fmri.tr = 0.71  # seconds per TR
    fmri.fmri.oversampling = 71  # HRF samples per TR (oversampling / tr = grid_hz)
    fmri.fmri.grid_hz = 100  # word-onset grid
    fmri.fmri.skip_trs = 19  # TRs dropped at the start of each story
    fmri.fmri.hrf_length_s = 32.0
    fmri.fmri.include_last_word = False  # officially the grid ends one frame early
    fmri.fmri.feature_zscore = "matrix"  # "matrix" (official) or "column"
    fmri.fmri.layers = "all"
    fmri.fmri.ridge_form = "svd"  # the official thin SVD; "primal"/"dual" are faster on CPU
    fmri.fmri.rcond = 0.0  # drop components below rcond x the largest (official: 0, s <= 1e-10)
    fmri.fmri.correlation_ddof = 1  # the official torch.std z-scores; 0 = plain Pearson r
    fmri.fmri.voxel_chunk = 2048
    return fmri
