"""configs/hybrid_100m.py on a TPU pod slice: multi-host, FSDP, 4x the global batch.

    # on worker 0 only: the official corpus, as published (or: hf download ...)
    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M
    # on every host of the slice (e.g. `gcloud compute tpus tpu-vm ssh NAME --worker=all --command=...`):
    pip install -e ".[tpu,gcs]"
    python -m babylm_jax.train --config configs/hybrid_100m_tpu_pod.py --workdir gs://BUCKET/runs/hybrid_100m \
        --config.data.corpus=data/babylm-zho-100M

The same model, objective and hanzi track (facts and heads) as configs/hybrid_100m.py. `jax.distributed.initialize()`
finds the coordinator itself on TPU pods (leave distributed.coordinator_address empty); each
process reads its own share of every batch. Process 0 prepares the data and pushes it to the
bucket; the other hosts fetch it (sha256-checked) and never read the corpus (docs/accelerators.md,
"Workdirs in a bucket"). Parameters, LAMB moments and EMA are sharded
over groups of 4 chips (`mesh.fsdp = 4`, one TPU host) along the embedding axis, and the
batch over all chips. Global batch 1,024 x 512 = 524,288 tokens per step; 2,500 steps ~
10 epochs (~1.3B tokens); LAMB is made for large batches, so the peak rate stays 1e-2 with
a proportionally shorter warmup. The global batch must divide by the number of processes.
Scanned layers (one layer's program for XLA to partition), remat, threefry bits, float32 logits: the
layout compiled for the pod, whose memory per chip and throughput estimate are in
experiments/README.md, "The accelerator steps compiled from this CPU" (hybrid_100m.py's
unrolled layers come from an H200's step anatomy).
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
    # the pod's layout (see above), not hybrid_100m.py's H200 one
    config.model.update(scan_layers=True, remat="dots_no_batch", norm_kernel="xla")  # Pallas' Triton kernels: GPU only
    config.train.update(rng_impl="threefry2x32", loss_logits_dtype="float32")
    config.checkpoint.every_steps = 250
    return config
