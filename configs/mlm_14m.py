"""~14M-parameter masked-LM encoder (bert-14m class) for one GPU on the official corpus.

    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M   # the official corpus, as published (or: hf download ...)
    python -m babylm_jax.prepare --config configs/mlm_14m.py --workdir runs/mlm_14m   # prints the token count
    python -m babylm_jax.train --config configs/mlm_14m.py --workdir runs/mlm_14m \
        --config.data.corpus=data/babylm-zho-100M

`data.corpus` is the official corpus as downloaded above, or your own text (see
configs/causal_14m.py). The model is configs/causal_14m.py's (6 layers, d 256, 4 heads,
FFN 1024, GELU, LayerNorm, tied 32,768-piece vocabulary) as a bidirectional encoder with a
BERT head transform: 13.2M parameters, the size of the official babylm-chinese-bert-14m
baseline. BERT's recipe: 15% of tokens predicted (80/10/10 corruption), rows of 128 tokens
for the first 90% of steps, then 512 (the 512-token rows are split into four 128-token
rows, so tokens per step stay 65,536); 17,000 steps ~ 10 epochs.
What the CPU study carries over (learning rate, tokens over size, two seeds per
comparison): configs/causal_14m.py. It takes causal_14m.py's speed settings (unrolled layers,
bf16 loss logits), which that recipe's step anatomy chose; target, attention (cuDNN,
bidirectional) and precision too; and its hanzi track (facts and heads), the heads at the masked
positions (`train.aux_heads.position="auto"`; not measured for this family). Its FLOPs and compiled memory: experiments/README.md, "The
accelerator steps compiled from this CPU".
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("causal_14m.py"))
    config.model.family = "mlm"
    config.train.seq_len_curriculum = ((0.0, 128), (0.9, 512))
    config.train.loss_kernel = "xla"  # not causal_14m.py's fused kernels: not costed for this family yet
    config.model.norm_kernel = "xla"
    return config
