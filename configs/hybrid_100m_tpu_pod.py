"""configs/hybrid_100m.py on a TPU pod slice: multi-host, FSDP, 4x the global batch.

    # on worker 0 only: the official corpus, as published (or: hf download ...)
    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M
    # on every host of the slice (e.g. `gcloud compute tpus tpu-vm ssh NAME --worker=all --command=...`):
    pip install -e ".[tpu,gcs]"
    python -m babylm_jax.train --config configs/hybrid_100m_tpu_pod.py --workdir gs://BUCKET/runs/hybrid_100m \
        --config.data.corpus=data/babylm-zho-100M

The same model and objective as configs/hybrid_100m.py. `jax.distributed.initialize()`
finds the coordinator itself on TPU pods (leave distributed.coordinator_address empty); each
process reads its own share of every batch. Process 0 prepares the data and pushes it to the
bucket; the other hosts fetch it (sha256-checked) and never read the corpus (README, "Workdirs
in a bucket"). Parameters, LAMB moments and EMA are sharded
over groups of 4 chips (`mesh.fsdp = 4`, one TPU host) along the embedding axis, and the
batch over all chips. Global batch 1,024 x 512 = 524,288 tokens per step; 2,500 steps ~
10 epochs (~1.3B tokens); LAMB is made for large batches, so the peak rate stays 1e-2 with
a proportionally shorter warmup. The global batch must divide by the number of processes.

Throughput (estimate, not measured): 728 MFLOP per token; on a v5p-32 slice (16 chips x
459 TFLOP/s bf16) at an assumed 35% MFU, ~3.5M tokens/s, so ~0.15 s per step and ~7 minutes
for 2,500 steps (plus compilation and checkpoints); on v4-32 (16 x 275 TFLOP/s) ~10
minutes. Memory per chip (libtpu 0.0.42.1 compiling this step for v5p:2x2x4 on a CPU host:
`python -m babylm_jax.aot --config configs/hybrid_100m_tpu_pod.py`, every curriculum length,
2026-12-02): with splash attention (model.attention auto on TPU) 0.45 GiB of sharded state and
7.44 GiB of temporaries, peak 7.89 GiB of a v5p chip's 95 GiB at rows of 128, 256 and 512 alike;
collectives all-reduce x6, all-gather x14, all-to-all x2. With model.attention='xla' (the
[B, H, L, L] scores materialised) the rows of 512 peaked at 14.3 GiB (13.9 GiB temporaries).
XLA's FLOP count leaves out the splash kernels. (The 16-virtual-CPU compile quoted before
said 52 GB: the CPU's attention and layouts, not a TPU's.)
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("hybrid_100m.py"))
    config.distributed.initialize = True
    config.mesh.fsdp = 4
    config.mesh.target = "tpu"
    config.mesh.topology = "v5p:2x2x4"  # v5p-32: 16 chips (python -m babylm_jax.aot compiles for it)
    config.train.update(batch_size=1024, num_steps=2500, warmup_steps=40, grad_accum_steps=2,
                        log_every_steps=25, eval_every_steps=250)
    # hybrid_100m.py's speed settings come from an H200's step anatomy; on TPU keep the compiled and
    # sized layout above: scanned layers (one layer's program for XLA to partition) and remat
    config.model.update(scan_layers=True, remat="dots_no_batch")
    config.train.update(rng_impl="threefry2x32", loss_logits_dtype="float32")
    config.checkpoint.every_steps = 250
    return config
