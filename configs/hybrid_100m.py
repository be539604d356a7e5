"""~100M GPT-BERT hybrid (MNTP + causal LM, as ltgoslo/gpt-bert) for one GPU, official corpus.

    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M   # the official corpus, as published (or: hf download ...)
    python -m babylm_jax.prepare --config configs/hybrid_100m.py --workdir runs/hybrid_100m
    python -m babylm_jax.train --config configs/hybrid_100m.py --workdir runs/hybrid_100m \
        --config.data.corpus=data/babylm-zho-100M

`data.corpus` is the official corpus as downloaded above, or your own text (see
configs/causal_14m.py).

It plays the hanzi track as configs/causal_14m.py does (2% of the budget as character facts that
`prepare` writes, every corpus hanzi a piece of its own, the same five heads and weights), with the
heads where the language-model loss predicts (`train.aux_heads.position="auto"`, a hybrid's "target"):
the masked token's labels at the position before it in the MNTP rows, the next token's in the causal
rows (1 in 16). They cost 7.9 MFLOP a training token (d 768 into 1,709 classes at every position),
about 1% of its 728, their logits in bf16 as the LM's: the anatomy puts them at 3.2 ms of a 249 ms
H200 step (1.3%, a prediction). Their effect is not measured for this family: the CPU evidence is
causal_14m.py's (its docstring).

The English BabyLM 2024 winner's recipe: 12 layers, d 768, 12 heads, FFN
2560 (gated; SwiGLU here), LayerNorm, tied 16,384-piece BPE vocabulary (112M parameters; BPE,
not base.py's jieba words, as in configs/causal_14m.py); LAMB lr 1e-2, weight decay 0.1, EMA 0.999
(used for evaluation and export), dropout 0.1; 1 row in 16 trained causally, the rest with MNTP;
masking rate 0.3 -> 0.15; rows of 128 tokens for the first 70% of steps, 256 until 90%, then 512
(a 512-token row is split into shorter rows, so tokens per step stay 256 x 512 = 131,072); one
epoch is about 130M tokens, so 10,000 steps ~ 10 epochs. LAMB's 1e-2 is GPT-BERT's own: its
layer-wise trust ratio scales each update, so the CPU study's AdamW finding (1e-2 worse than
3e-3 at d 128) does not carry over; its other lessons (tokens over size, two seeds per
comparison) do: configs/causal_14m.py.

Target: one 80 GB H100 or an H200 (`mesh.target`, `mesh.topology`): cuDNN flash attention
(`model.attention=auto` on CUDA in bf16), bf16 compute with float32 params and residual stream,
every curriculum length and the eval step compiled before step 1. Unrolled layers, nothing
rematerialised, XLA's RngBitGenerator for dropout and masking (`train.rng_impl="rbg"`; its bits
differ by backend and by sharding) and bf16 loss logits (reduced in float32): the H200 step's
anatomy (experiments/README.md, "GPU step anatomy") found them cheaper than scanned layers,
remat, threefry's hash and float32 logits, within an 80 GB H100.

Fused kernels (docs/accelerators.md, "Fused kernels"): each block's residual add, norm and cast are
one pass (`model.norm_kernel="pallas"`). A prediction, not yet measured: the anatomy puts the step at
249 ms against 260 without it (the heads included), MFU 0.36 against 0.34, and 2 GiB less memory; the
fused loss does not pay at d 768 (five matmuls where XLA's chunks run three: 261 ms), so the loss stays "xla"
(experiments/README.md, "Fused kernels"). On a CPU: `--config.model.norm_kernel=xla`.
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.data.corpus = "data/babylm-zho-100M"  # huggingface-cli download (see above)
    config.data.tokenizer.kind = "bpe"  # not base.py's jieba words (see above)
    config.data.tokenizer.training_sentences = 2_000_000
    # The hanzi track as in configs/causal_14m.py (see above); the heads where the LM loss predicts
    config.data.hanzi_facts.update(share=0.02, characters=3500)
    config.data.tokenizer.required_characters = "corpus_cjk"
    config.train.aux_heads.update(syllable=0.3, tone=0.1, initial=0.1, final=0.1, radical=0.1)

    config.model.update(family="hybrid", vocab_size=16_384, d_model=768, num_layers=12, num_heads=12, d_ff=2560,
                        norm="layernorm", dropout=0.1, dtype="bfloat16")
    config.train.update(
        num_steps=10_000, batch_size=256, seq_len=512, optimizer="lamb", learning_rate=1e-2, warmup_steps=160,
        b2=0.98, grad_clip=2.0, ema_decay=0.999, mask_rate=0.3, seq_len_curriculum=((0.0, 128), (0.7, 256), (0.9, 512)),
        grad_accum_steps=1, log_every_steps=50, eval_every_steps=500, eval_batches=20,
        rng_impl="rbg", loss_logits_dtype="bfloat16",
    )
    config.model.norm_kernel = "pallas"  # the fused residual add + norm (see above)
    config.mesh.target = "cuda"  # train refuses a CPU backend unless --allow_cpu
    config.mesh.topology = "h100"  # the GPU `python -m babylm_jax.aot` compiles for
    config.checkpoint.every_steps = 500
    config.checkpoint.max_to_keep = 3
    return config
