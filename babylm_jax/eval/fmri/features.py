"""Model features for fMRI encoding: mean-pooled hidden states of every layer in one forward pass.

    layers_LxWxD = word_features(model, params, tokenizer, family, words)          # word_fmri
    layers_LxWxD = story_word_features(model, params, tokenizer, family, lines)    # fmri

Layer l of the result is `Transformer.encode(..., return_hidden_states=True)` entry l:
0 = embeddings, N = the final normed output (the official "last layer", index -1).

Every row is framed as the model family trains (`core.families`): `[bos] tokens [eos]` for
causal models, `[cls] tokens [sep]` for masked and hybrid models.
- Words alone (word_fmri): each word is one row; its feature is the mean over every position
  of the row, special tokens included, as the official code pools over the attention mask.
- Words in context (fmri): the words of a context (one line of the story by default, or the
  whole story) are tokenized each on its own and concatenated, as
  `tokenizer(words, is_split_into_words=True)` does in the official `infer_sentence.py`; a
  word's feature is the mean over its own tokens (special tokens excluded; a word with no
  token gets zeros). Contexts longer than the model's maximum length are cut greedily into
  chunks of whole words whose token counts fit (each chunk a fresh row with its own special
  tokens); a single word too long for a row keeps its first tokens, as the official
  truncation does. (Tokenizing the joined line once, as text is read in training, scored
  lower at every layer of a causal and a masked model on `fmri_synth` data, so it is not
  offered.)

Every row is a sequence of token ids plus "pools" (lists of positions to average). Rows are
sorted into power-of-two length buckets with a fixed token budget per batch, so a task
compiles once per bucket; the pooling happens inside the jitted forward pass, all batches
are dispatched before the results are fetched.
"""
from __future__ import annotations

import functools
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from babylm_jax.core.families import family_spec
from babylm_jax.corpus.tokenizer import Tokenizer
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


def word_features(model: Transformer, params, tokenizer: Tokenizer, family: str, words: Sequence[str],
                  **kwargs) -> np.ndarray:
    """[layers, words, D]: each word encoded alone, mean over all its row's positions (specials included)."""
    framing = family_spec(family).framing
    room = model.config.max_len - 2  # opener and closer
    rows = [framing.frame(tokenizer.encode(w)[:room]) for w in words]
    pools = [[list(range(len(r)))] for r in rows]
    return pooled_hidden_states(model, params, rows, pools, **kwargs)


def _split_row(pieces: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Each word's own token ids, concatenated, and per word the indices of its tokens."""
    ids: list[int] = []
    members = []
    for piece in pieces:
        members.append(list(range(len(ids), len(ids) + len(piece))))
        ids += piece
    return ids, members


def context_rows(tokenizer: Tokenizer, words: Sequence[str], room: int) -> list[tuple[list[int], list[list[int]]]]:
    """(ids, token indices per word) of each chunk of one context: whole words, at most `room` tokens a chunk.

    A word joins the current chunk while the chunk's token count stays within `room`; a word
    alone over `room` is a chunk of its own (cut to `room` by the caller).
    """
    pieces = tokenizer.encode_batch(list(words)) if words else []
    chunks: list[list[list[int]]] = []
    current: list[list[int]] = []
    for piece in pieces:
        if current and sum(map(len, current)) + len(piece) > room:
            chunks.append(current)
            current = []
        current.append(piece)
    if current:
        chunks.append(current)
    return [_split_row(chunk) for chunk in chunks]


def story_word_features(model: Transformer, params, tokenizer: Tokenizer, family: str,
                        contexts: Sequence[Sequence[str]], **kwargs) -> np.ndarray:
    """[layers, words, D] for the words of all `contexts` in order, each pooled over its tokens in context."""
    framing = family_spec(family).framing
    room = model.config.max_len - 2  # opener and closer
    rows, pools = [], []
    for words in contexts:
        for ids, members in context_rows(tokenizer, words, room):
            rows.append(framing.frame(ids[:room]))
            pools.append([[1 + t for t in m if t < room] for m in members])  # after the opener
    return pooled_hidden_states(model, params, rows, pools, **kwargs)
