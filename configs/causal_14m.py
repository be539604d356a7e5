"""~14M-parameter causal LM (Pythia-14M class) for one GPU on the official corpus.

    huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset \
        --local-dir data/babylm-zho-100M   # the official corpus, as published (or: hf download ...)
    python -m babylm_jax.prepare --config configs/causal_14m.py --workdir runs/causal_14m   # prints the token count
    python -m babylm_jax.train --config configs/causal_14m.py --workdir runs/causal_14m \
        --config.data.corpus=data/babylm-zho-100M

`data.corpus` is the official corpus as downloaded above (its parquet files; a
`datasets.save_to_disk` folder also works) or a directory of your own 102M-word training
text (.txt with one document per blank-line block, .jsonl/.parquet with a `text` field);
the default below is a placeholder path relative to the working directory.

Size. The official Zh-Pythia-14M / babylm-chinese-pythia-14M baselines are Pythia-14M:
6 layers, d 128, 4 heads, FFN 512, GELU, LayerNorm, vocabulary 50,304 with separate input
and output embeddings (2 x 6.4M + 1.2M body = 14.1M). Our embeddings are tied, so we keep
the depth, heads, 4x FFN ratio, GELU and LayerNorm and spend the same total on d 256 and a
32,768-piece vocabulary: 13.1M parameters (4.7M body + 8.4M embedding). For Pythia's exact
body instead: --config.model.d_model=128 --config.model.d_ff=512 (then 5.4M parameters).

Tokenizer. BPE with 32,768 pieces, named here because base.py's default is now "char". The
CPU study (experiments/README.md, "Recipes that learn") found characters and BPE-6000 tied
on ZhoBLiMP at equal compute (0.603 / 0.601 at 25 TFLOP), so it gives no reason to leave
the subword vocabulary that sizes this recipe after Pythia's. Characters never split a
hanzi into bytes and make the vocabulary projection cheap (a 32k vocabulary is 60% of this
recipe's FLOPs a token) but cost ~1.4x the tokens an epoch; to try them:
--config.data.tokenizer.kind=char --config.data.tokenizer.required_characters=corpus_cjk
(then model.vocab_size must hold the corpus' distinct hanzi; `prepare` says if it does not).

Length. One epoch is roughly 110M tokens (102M jieba words ~ 150M characters, ~1.4
characters per piece of a 32k unigram vocabulary; the prepare step prints the exact
count). 17,000 steps x 128 x 512 tokens = 1.1B tokens ~ 10 epochs (the baselines report
3, 10 and 20 epochs). Set num_steps = epochs x tokens / 65,536.

What the CPU study (experiments/README.md, "Recipes that learn"; 1.6M-parameter models on
2.7M words) carries over, and what it does not:
- Learning rate: 1e-2 cost 4 points of ZhoBLiMP against 3e-3 at d 128 (0.560 / 0.603);
  1e-3 tied 3e-3 there (0.605) with the lowest eval loss. Wider models want lower rates, so
  this recipe keeps Pythia-14M's 1e-3 (batch 65,536 tokens) with 1,000 warmup steps (6%).
- Tokens over size: at equal compute, more steps beat a wider model (d 192 on the same
  steps: 0.576 against d 128's 0.603 at 1.8x the FLOPs), and ZhoBLiMP rose over the whole
  2.2 passes of the 99-TFLOP run (0.575 at 1M words seen, 0.660 at 5.9M). At 102M words
  this recipe's ~10 epochs (1.1B tokens) spends the budget on passes, not on width.
- Seeds: ZhoBLiMP moved 1.3-1.4 points either way between two seeds at both CPU budgets,
  so compare recipes on two or more seeds (--config.train.seed) or on the eval loss.
- Not carried over: the tokenizer (above) and the exact step count (the CPU curve flattens
  over its last 0.9M words; a 14M model on 102M words is far from that regime).

Speed (experiments/README.md, "GPU step anatomy"). Measured on an H200 with scanned layers and
float32 loss logits: 34.9 ms a step (1.88M tokens/s, MFU 0.16). Its anatomy
(`experiments/benchmarks/gpu_step_anatomy.py`) puts 44% of the step in the loss: a 32k
vocabulary's chunk of logits does not stay in the GPU's cache, so its passes go to HBM; and the
scanned layers' stacked copies of the saved activations cost most of the rest. So a loss chunk
keeps its logits in bf16 (`train.loss_logits_dtype`, reduced in float32) and the layers are
unrolled (`scan_layers=False`): predicted 22.5 ms a step, MFU 0.25, to be measured at the next GPU
lend (experiments/benchmarks/h200_speed.sh). Target: one 80 GB H100 or an H200 (`mesh.target`,
`mesh.topology`), cuDNN flash attention (`model.attention=auto`, causal), a float32 residual
stream, loss chunks of 2,048 rows on the GPU; 4.5 GiB peak in one pass of 128 rows, so the recipe
takes one pass (`grad_accum_steps=1`). Bit-exact GPU runs: `train.deterministic=true` with
`model.embedding_grad=one_hot` (predicted 1.16x the step time; without one_hot the scatter-add
of the embedding gradient becomes a sort: 1.38x).
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
        family="causal", vocab_size=32_768, d_model=256, num_layers=6, num_heads=4, d_ff=1024,
        max_len=512, mlp="gelu", norm="layernorm", dtype="bfloat16", scan_layers=False, remat="none",
        attention="auto", residual_dtype="float32",  # see "Speed" above
    )

    config.train.update(
        num_steps=17_000, batch_size=128, seq_len=512, learning_rate=1e-3, warmup_steps=1000,
        min_lr_ratio=0.1, weight_decay=0.1, b2=0.95, log_every_steps=100, eval_every_steps=1000,
        eval_batches=20, grad_accum_steps=1, loss_logits_dtype="bfloat16",  # see "Speed" above
    )
    config.mesh.target = "cuda"  # train refuses a CPU backend unless --allow_cpu
    config.mesh.topology = "h100"  # the GPU `python -m babylm_jax.aot` compiles for
    config.checkpoint.every_steps = 1000
    config.checkpoint.max_to_keep = 3
    return config
