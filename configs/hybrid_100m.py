"""~100M GPT-BERT hybrid (MNTP + causal LM, as ltgoslo/gpt-bert) for one GPU, official corpus.

    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M   # the official corpus, as published (or: hf download ...)
    python -m babylm_jax.prepare --config configs/hybrid_100m.py --workdir runs/hybrid_100m
    python -m babylm_jax.train --config configs/hybrid_100m.py --workdir runs/hybrid_100m \
        --config.data.corpus=data/babylm-zho-100M

`data.corpus` is the official corpus as downloaded above, or your own text (see
configs/causal_14m.py). The English BabyLM 2024 winner's recipe: 12 layers, d 768, 12
heads, FFN 2560 (gated; SwiGLU here), LayerNorm, tied 16,384-piece vocabulary (112M
parameters; BPE, named here as base.py's default is now "char": see configs/causal_14m.py,
"Tokenizer"); LAMB lr 1e-2, weight decay 0.1, EMA 0.999 (used for evaluation and export),
dropout 0.1; 1 row in 16 trained causally, the rest with MNTP; masking rate 0.3 -> 0.15;
rows of 128 tokens for the first 70% of steps, 256 until 90%, then 512 (a 512-token row is
split into shorter rows, so tokens per step stay 256 x 512 = 131,072). One epoch is about
130M tokens (16k vocabulary: ~1.2 characters per piece); 10,000 steps ~ 10 epochs. bf16
compute, params f32, layers unrolled and nothing rematerialised (see "Speed").
LAMB's 1e-2 is GPT-BERT's own: its layer-wise trust ratio scales each update, so the CPU
study's AdamW finding (1e-2 worse than 3e-3 at d 128) does not carry over; its other lessons
(tokens over size, two seeds per comparison) do: configs/causal_14m.py.

Target: one 80 GB H100 or an H200 (`mesh.target`, `mesh.topology`). cuDNN flash attention
(`model.attention=auto` on CUDA in bf16), a float32 residual stream, bf16 loss matmuls with
float32 accumulation in chunks of 4,096 rows, every curriculum length and the eval step compiled
before step 1.

Speed (experiments/README.md, "GPU step anatomy"). Measured on an H200 with scanned layers, remat
of everything but the weight matmuls, threefry random bits and float32 loss logits: 350 ms a step
(374k tokens/s, MFU 0.26). The step's anatomy (`experiments/benchmarks/gpu_step_anatomy.py`, the
step compiled for an H200 on a CPU host, its kernels costed by a roofline fitted to that figure)
finds half of it memory-bound: scanned layers copy every saved activation into and out of stacked
buffers (and zero-fill them), and the remat recompute of the layer norms, SwiGLU and dropout costs
more than keeping them. So the layers are unrolled (`scan_layers=False`: no stacked copies, a longer
compile), nothing is rematerialised (58 GiB peak at 256 x 512, within an 80 GB H100), dropout and
masking take XLA's RngBitGenerator (`train.rng_impl="rbg"`, cheaper than threefry's hash; the bits
differ by backend, and by sharding) and a loss chunk keeps its logits in bf16
(`train.loss_logits_dtype`, reduced in float32): predicted ~250 ms a step, MFU ~0.35, to be
measured at the next GPU lend (experiments/benchmarks/h200_speed.sh). What is left above that is
XLA's memory-bound elementwise passes (norms, SwiGLU's backward, dropout, the float32 stream).
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.data.corpus = "data/babylm-zho-100M"  # huggingface-cli download (see above)
    config.data.tokenizer.kind = "bpe"  # named here: base.py's default is "char" (see "Tokenizer" above)
    config.data.tokenizer.training_sentences = 2_000_000
    # Hanzi track (README "Hanzi facts"): spend a share of the budget on generated character facts and
    # give every corpus hanzi an id of its own (the hanzi tasks' UNK rule then never fires), e.g.
    #   python -m babylm_jax.tools.hanzi_facts --out data/hanzi_facts --characters 3500 --share 0.02
    #   config.data.paths = ("data/hanzi_facts",); config.data.tokenizer.required_characters = "corpus_cjk"
    # and, as BabyDragon-v4 did (experiments/README.md, "Issue 26"), auxiliary reading and radical heads
    # during pretraining (training only; the exported model is unchanged) and radicals and parts as tokens:
    #   --config.train.aux_heads.syllable=0.3 --config.train.aux_heads.tone=0.1 --config.train.aux_heads.initial=0.1
    #   --config.train.aux_heads.final=0.1 --config.train.aux_heads.radical=0.1   (position "target": the
    #   predicted token's labels where the LM loss predicts it, i.e. the masked token for MNTP/MLM rows)
    #   --config.data.tokenizer.required_characters=corpus_cjk_parts   (with BPE the radicals and parts become
    #   user symbols that never merge, common ones such as 口 人 大 included: unmeasured at this scale)
    # (the official corpus must then leave 2% of the 102M words free: trim it to fit).

    config.model.update(
        family="hybrid", vocab_size=16_384, d_model=768, num_layers=12, num_heads=12, d_ff=2560,
        max_len=512, mlp="swiglu", norm="layernorm", dropout=0.1, dtype="bfloat16",
        scan_layers=False, remat="none", attention="auto", residual_dtype="float32",  # see "Speed" above
    )

    config.train.update(
        num_steps=10_000, batch_size=256, seq_len=512, optimizer="lamb", learning_rate=1e-2,
        warmup_steps=160, schedule="cosine", min_lr_ratio=0.1, weight_decay=0.1, b1=0.9, b2=0.98,
        grad_clip=2.0, ema_decay=0.999, mask_rate=0.3, mask_rate_final=0.15, hybrid_causal_share=1 / 16,
        seq_len_curriculum=((0.0, 128), (0.7, 256), (0.9, 512)),
        grad_accum_steps=1, log_every_steps=50, eval_every_steps=500, eval_batches=20,
        rng_impl="rbg", loss_logits_dtype="bfloat16",  # see "Speed" above
    )
    config.mesh.target = "cuda"  # train refuses a CPU backend unless --allow_cpu
    config.mesh.topology = "h100"  # the GPU `python -m babylm_jax.aot` compiles for
    config.checkpoint.every_steps = 500
    config.checkpoint.max_to_keep = 3
    return config
