"""Model features for fMRI encoding: mean-pooled hidden states of every layer in one forward pass.

    layers_LxWxD = word_features(model, params, tokenizer, family, words)          # word_fmri
    layers_LxWxD = story_word_features(model, params, tokenizer, family, lines)    # fmri

Layer l of the result is `Transformer.encode(..., return_hidden_states=True)` entry l:
0 = embeddings, N = the final normed output (the official "last layer", index -1).

Every row is framed as the model family trains (`data.framing`): `[bos] tokens [eos]` for
causal models, `[cls] tokens [sep]` for masked and hybrid models.
- Words alone (word_fmri): each word is one row; its feature is the mean over every position
  of the row, special tokens included, as the official code pools over the attention mask.
- Words in context (fmri): the words of a context (one line of the story by default, or the
  whole story) are joined with `separator` ("" for Chinese) and tokenized once; a token
  belongs to every word whose character span it overlaps, and a word's feature is the mean
  over its tokens (special tokens excluded; a word with no token gets zeros, as officially).
  Contexts longer than the model's maximum length are cut greedily into chunks of whole
  words that fit (each chunk a fresh row with its own special tokens), as the official code
  does; a single word too long for a row keeps its first tokens.

Every row is a sequence of token ids plus "pools" (lists of positions to average). Rows are
sorted into power-of-two length buckets with a fixed token budget per batch, so a task
compiles once per bucket; the pooling happens inside the jitted forward pass, all batches
are dispatched before the results are fetched.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from babylm_jax.data.framing import framing_for
from babylm_jax.model.transformer import Transformer

MIN_BUCKET = 8


@functools.partial(jax.jit, static_argnums=0)
def _pooled_forward(model: Transformer, params, tokens_BxL, segments_BxL, weights_BxPxL):
    _, hidden_NxBxLxD = model.apply(params, tokens_BxL, segments_BxL, return_hidden_states=True,
                                    method=Transformer.encode)
    return jnp.einsum("nbld,bpl->nbpd", hidden_NxBxLxD.astype(jnp.float32), weights_BxPxL)


def _bucket(length: int, max_len: int) -> int:
    return min(max_len, max(MIN_BUCKET, 1 << (length - 1).bit_length()))


def pooled_hidden_states(model: Transformer, params, rows: Sequence[Sequence[int]],
                         pools: Sequence[Sequence[Sequence[int]]], *, tokens_per_batch: int = 8192,
                         progress: str | None = None) -> np.ndarray:
    """Mean hidden state of every layer over each pool's positions: [layers, pools, D] (float32).

    `rows[i]` are token ids (at most the model's max_len); `pools[i]` lists, for row i, the
    position lists to average (an empty list gives zeros), at most one per position. Pools
    come out in row order.
    """
    max_len = model.config.max_len
    for i, row in enumerate(rows):
        if not 0 < len(row) <= max_len or len(pools[i]) > len(row):
            raise ValueError(f"row {i}: {len(row)} tokens and {len(pools[i])} pools; rows need 1..{max_len} "
                             "tokens (model.max_len) and at most one pool per token")
    params = nn.meta.unbox(params)
    offsets = np.cumsum([0] + [len(p) for p in pools])
    buckets: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        buckets.setdefault(_bucket(len(row), max_len), []).append(i)
    pending = []
    batches = [(length, ids[s:s + max(1, tokens_per_batch // length)])
               for length, ids in sorted(buckets.items())
               for s in range(0, len(ids), max(1, tokens_per_batch // length))]
    for length, batch in tqdm(batches, desc=progress, disable=progress is None):
        size = max(1, tokens_per_batch // length)
        num_pools = 1 if all(len(pools[i]) == 1 for i in batch) else length  # a row has at most `length` words
        tokens = np.zeros((size, length), np.int32)
        segments = np.zeros((size, length), np.int32)
        weights = np.zeros((size, num_pools, length), np.float32)
        for b, i in enumerate(batch):
            tokens[b, :len(rows[i])] = rows[i]
            segments[b, :len(rows[i])] = 1
            for p, positions in enumerate(pools[i]):
                if len(positions):
                    weights[b, p, list(positions)] = 1.0 / len(positions)
        out = _pooled_forward(model, params, jnp.asarray(tokens), jnp.asarray(segments), jnp.asarray(weights))
        pending.append((batch, out))
    num_layers = model.config.num_layers + 1
    result = np.zeros((num_layers, int(offsets[-1]), model.config.d_model), np.float32)
    for (batch, _), out in zip(pending, jax.device_get([o for _, o in pending])):
        for b, i in enumerate(batch):
            result[:, offsets[i]:offsets[i + 1]] = out[:, b, :len(pools[i])]
    return result


def word_features(model: Transformer, params, tokenizer: Any, family: str, words: Sequence[str],
                  **kwargs) -> np.ndarray:
    """[layers, words, D]: each word encoded alone, mean over all its row's positions (specials included)."""
    framing = framing_for(family)
    room = model.config.max_len - 2  # opener and closer
    rows = [framing.frame(tokenizer.encode(w)[:room]) for w in words]
    pools = [[list(range(len(r)))] for r in rows]
    return pooled_hidden_states(model, params, rows, pools, **kwargs)


def _tokens_per_word(tokenizer: Any, words: Sequence[str], separator: str) -> tuple[list[int], list[list[int]]]:
    """Token ids of the joined words and, per word, the indices of tokens overlapping its characters."""
    text, spans, start = "", [], 0
    for k, word in enumerate(words):
        if k:
            text += separator
            start += len(separator)
        spans.append((start, start + len(word)))
        text += word
        start += len(word)
    ids, offsets = tokenizer.encode_with_offsets(text)
    starts = np.array([o[0] for o in offsets], int)
    ends = np.array([o[1] for o in offsets], int)
    members = [np.flatnonzero((starts < e) & (ends > s) & (ends > starts)).tolist() for s, e in spans]
    return list(ids), members


def _chunk_words(tokenizer: Any, words: Sequence[str], separator: str, room: int) -> list[list[str]]:
    """Greedy whole-word chunks whose joined text has at most `room` tokens."""
    chunks: list[list[str]] = []
    current: list[str] = []
    for word in words:
        trial = current + [word]
        if len(tokenizer.encode(separator.join(trial))) <= room or not current:
            current = trial
        else:
            chunks.append(current)
            current = [word]
    if current:
        chunks.append(current)
    return chunks


def story_word_features(model: Transformer, params, tokenizer: Any, family: str,
                        contexts: Sequence[Sequence[str]], *, separator: str = "", **kwargs) -> np.ndarray:
    """[layers, words, D] for the words of all `contexts` in order, each pooled over its tokens in context."""
    framing = framing_for(family)
    room = model.config.max_len - 2  # opener and closer
    rows, pools = [], []
    for words in contexts:
        for chunk in _chunk_words(tokenizer, words, separator, room):
            ids, members = _tokens_per_word(tokenizer, chunk, separator)
            rows.append(framing.frame(ids[:room]))
            pools.append([[1 + t for t in m if t < room] for m in members])  # after the opener
    return pooled_hidden_states(model, params, rows, pools, **kwargs)
