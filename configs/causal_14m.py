"""~14M-parameter causal LM (Pythia-14M class) for one GPU on the official corpus.

    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M   # the official corpus, as published (or: hf download ...)
    python -m babylm_jax.prepare --config configs/causal_14m.py --workdir runs/causal_14m   # prints the token count
    python -m babylm_jax.train --config configs/causal_14m.py --workdir runs/causal_14m \
        --config.data.corpus=data/babylm-zho-100M

`data.corpus` is the official corpus as downloaded above (its parquet files; a
`datasets.save_to_disk` folder also works) or a directory of your own 102M-word training
text (.txt with one document per blank-line block, .jsonl/.parquet with a `text` field).

It plays all fourteen tasks, the hanzi track's four included (docs/hanzi.md). `prepare` writes 2% of
the 102M-word budget (2.04M jieba words: 5,521 paragraphs, 1.6 passes over the 3,500 most frequent
hanzi; 21 s) as generated character facts into the workdir, the first source of budget.json, so the
corpus must fit in the other 98% (prepare refuses more, naming the facts). Every corpus hanzi is a
piece of its own (`required_characters="corpus_cjk"`), and auxiliary heads (training only; the export
is unchanged) predict each single-hanzi token's syllable (loss weight 0.3, as BabyDragon-v4's pinyin
head), tone, initial, final and radical (0.1 each) at its own position, as the CPU study measured best
(experiments/README.md, "auxiliary heads"). Tokens that are BPE pieces of two or more hanzi have no
labels and add nothing to the heads' loss; a character the facts name is quoted (“汞”), so it is a
piece of its own (prepared on the builtin corpus: 31% of the facts' tokens and 21% of the corpus's
carry labels). The heads cost 2.6 of a training token's 83 MFLOP (3%: d 256 into 1,709 classes),
their logits in bf16 as the LM's (`train.loss_logits_dtype`); the anatomy puts them at 0.8 ms of a
19.1 ms H200 step (4%, a prediction), and on the CPU they cost what their FLOPs do (base.py with the
same heads: 1.11x the step time for 11% more FLOPs; experiments/benchmarks/aux_heads_cost.py).
Their expected effect, from the CPU (experiments/README.md, "The hanzi track in the recipes"): at
base.py's 99.4 TFLOP, facts (23% of its words) and these heads took the open hanzi probe from 0.49 /
0.53 (structure / pinyin, two seeds without) to 0.73 / 0.76 and cost ZhoBLiMP 2.3 points (one seed
so far; 0.647 against 0.670); at 1,200 steps, 0.51 / 0.51 to 0.63 / 0.58 with ZhoBLiMP inside the
seed spread (two seeds each). A 2% share at the 102M scale is a smaller part of what the model reads.

The official baselines' model, Pythia-14M: its depth, heads, 4x FFN ratio, GELU and LayerNorm,
with tied embeddings, so its 14M parameters go to d 256 and a 32,768-piece BPE vocabulary (13.1M;
Pythia's own body: --config.model.d_model=128 --config.model.d_ff=512). BPE, not base.py's jieba
words: at the CPU scale both beat characters and scored within each other's seed spread
(experiments/README.md, "Words as tokens"), so the vocabulary stays the one the size is set by
(words: --config.data.tokenizer.kind=words; characters: --config.data.tokenizer.kind=char
--config.data.tokenizer.required_characters=corpus_cjk, with a model.vocab_size that holds the
corpus' distinct hanzi). Pythia-14M's learning rate 1e-3 (wider
models want lower rates than the CPU study's 3e-3), 6% warmup, 17,000 steps of 128 x 512 tokens
~ 10 epochs of ~110M tokens (num_steps = epochs x tokens / 65,536). Why, with the CPU study's
lessons: experiments/README.md, "Recipes that learn".

Target: one 80 GB H100 or an H200 (`mesh.target`, `mesh.topology`), cuDNN flash attention, one
pass a step. Unrolled layers and bf16 loss logits (reduced in float32): the H200 step's anatomy
(experiments/README.md, "GPU step anatomy") found the scanned layers' stacked copies and a 32k
vocabulary's logits its largest costs. Bit-exact GPU runs: `train.deterministic=true` with
`model.embedding_grad=one_hot`.

Fused kernels (docs/accelerators.md, "Fused kernels"): the loss over the 32k vocabulary never writes
its logits (`train.loss_kernel="pallas"`) and each block's residual add, norm and cast are one pass
(`model.norm_kernel="pallas"`). A prediction, not yet measured: the anatomy puts the step at 19.1 ms
against 23.2 without them, MFU 0.29 against 0.24 (0.30 without the heads; experiments/README.md,
"Fused kernels"). On a CPU
the kernels run in interpret mode, slowly: `--config.train.loss_kernel=xla --config.model.norm_kernel=xla`.
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.data.corpus = "data/babylm-zho-100M"  # huggingface-cli download (see above)
    config.data.tokenizer.kind = "bpe"  # not base.py's jieba words (see above)
    config.data.tokenizer.training_sentences = 2_000_000
    # The hanzi track (docs/hanzi.md; see above): prepare writes the facts into the workdir, the heads train
    # on the single-hanzi pieces. Off for an ablation: --config.data.hanzi_facts.share=0 and each head at 0.
    config.data.hanzi_facts.update(share=0.02, characters=3500)
    config.data.tokenizer.required_characters = "corpus_cjk"  # every corpus hanzi a piece of its own
    config.train.aux_heads.update(syllable=0.3, tone=0.1, initial=0.1, final=0.1, radical=0.1)

    config.model.update(vocab_size=32_768, d_model=256, num_layers=6, num_heads=4, d_ff=1024, mlp="gelu",
                        norm="layernorm", dtype="bfloat16")
    config.train.update(
        num_steps=17_000, batch_size=128, seq_len=512, learning_rate=1e-3, warmup_steps=1000, log_every_steps=100,
        eval_every_steps=1000, eval_batches=20, grad_accum_steps=1, loss_logits_dtype="bfloat16",
        loss_kernel="pallas",  # the fused loss (see above; on a CPU it runs in interpret mode: "xla" there)
    )
    config.model.norm_kernel = "pallas"  # the fused residual add + norm (see above)
    config.mesh.target = "cuda"  # train refuses a CPU backend unless --allow_cpu
    config.mesh.topology = "h100"  # the GPU `python -m babylm_jax.aot` compiles for
    config.checkpoint.every_steps = 1000
    config.checkpoint.max_to_keep = 3
    return config
