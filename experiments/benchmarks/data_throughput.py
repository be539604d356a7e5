"""Data throughput: jieba word counting, tokenisation with all cores, grain pipeline vs training.

    python experiments/benchmarks/data_throughput.py [--documents 6000]

Prints words/s of the official jieba count (worker processes, all cores), tokens/s of the
cache tokenisation (all cores), the grain pipeline's batches/s on the base config's batch
shape, and the base model's jitted causal train step rate (value_and_grad of
objectives.compute_loss + optax adamw) measured in the same process, with the run's
conditions (matmul peak probed before each timed part against the best known idle peak, load
before and after: `conditions.py`). Last line: `pipeline_over_train_ratio: N` (target >= 10).
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import optax
from flax.linen import meta

from conditions import Conditions
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.files import load_config_file
from babylm_jax.corpus import cache_keys
from babylm_jax.corpus import corpus_cache
from babylm_jax.corpus import pipeline
from babylm_jax.corpus import preparation
from babylm_jax.corpus import token_cache
from babylm_jax.core import workers
from babylm_jax.config.data import DataConfig
from babylm_jax.core.families import family_spec
from babylm_jax.model import objectives
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def base_config():
    return load_config_file(ROOT / "configs" / "base.py")


def train_steps_per_second(config, batch: dict, steps: int = 10) -> float:
    model = Transformer(ModelConfig.from_config(config.model))
    params = meta.unbox(model.init(jax.random.PRNGKey(0), jnp.asarray(batch["tokens"])))
    optimizer = optax.adamw(config.train.learning_rate, weight_decay=config.train.weight_decay)
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params, opt_state, batch):
        (loss, _), grads = jax.value_and_grad(
            lambda p: objectives.compute_loss(model, p, batch, jax.random.PRNGKey(1)), has_aux=True
        )(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    device_batch = {k: jnp.asarray(v) for k, v in batch.items() if k != "words"}
    params, opt_state, loss = step(params, opt_state, device_batch)
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state, device_batch)
    loss.block_until_ready()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=6000, help="built-in documents to prepare")
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    conditions = Conditions.start()
    config = base_config()
    config.data.max_documents = args.documents
    config.data.shard_chars = 200_000
    config.data.tokenizer.kind = "bpe"  # tokenizer training speed is not what this measures
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="data_throughput_"))

    conditions.probe()
    start = time.perf_counter()
    data_config = DataConfig.from_config(config.data)
    corpus = corpus_cache.count_corpus(data_config, workdir / "data")
    count_s = time.perf_counter() - start
    words = int(corpus.doc_array("doc_words").sum())
    print(f"jieba count: {words:,} words in {count_s:.1f} s = {words / count_s:,.0f} words/s ({workers.num_workers(data_config.num_workers)} workers)")

    prepared = preparation.prepare_corpus(RunConfig.from_config(config), workdir)  # trains the tokenizer, then tokenises
    for finished in corpus.root.glob("tokens-*"):  # time the tokenisation alone, from scratch
        shutil.rmtree(finished)
    key = cache_keys.tokenizer_key(corpus.root.name, data_config.tokenizer, config.model.vocab_size)
    conditions.probe()
    start = time.perf_counter()
    framing = family_spec(config.model.family).framing
    tokens = token_cache.tokenize_corpus(corpus, corpus.root / f"tokenizer-{key}", cache_keys.token_cache_key(key, framing),
                                         framing, data_config.num_workers)
    tok_s = time.perf_counter() - start
    print(f"tokenisation: {len(tokens.tokens):,} tokens in {tok_s:.1f} s = {len(tokens.tokens) / tok_s:,.0f} tokens/s")
    del prepared

    data = pipeline.build_train_data(RunConfig.from_config(config), workdir)
    batch = next(data.train_iterator)
    conditions.probe()
    start = time.perf_counter()
    for _ in range(args.batches):
        batch = next(data.train_iterator)
    pipeline_rate = args.batches / (time.perf_counter() - start)
    print(f"pipeline: {pipeline_rate:,.1f} batches/s of {batch['tokens'].shape}")
    conditions.probe()
    train_rate = train_steps_per_second(config, batch)
    print(f"train step (base model, causal, adamw): {train_rate:,.2f} steps/s")
    conditions.report()
    print(f"pipeline_over_train_ratio: {pipeline_rate / train_rate:.1f}")


if __name__ == "__main__":
    main()
