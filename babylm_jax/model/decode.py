"""Text from a trained model: left-to-right generation with a KV cache, and filling [MASK]s.

    prompts = encode_prompts(tokenizer, ["今天天气", "我们"], family="causal", room=max_len - 32)
    generate = make_generate(model, Sampling(max_new_tokens=32, temperature=0.0), EOS_ID, tokenizer.vocab_size)
    new_BxN = generate(params, prompts.tokens_BxP, prompts.pads_B, jax.random.key(0))
    texts = continuations(tokenizer, new_BxN, stop_id=EOS_ID)

A batch of prompts is left-padded to the longest one (P tokens with the family's opener), so
every row's last prompt token sits in slot P-1 and all rows step together. Each row's positions
count from its first real token, as if it were alone; padding slots are never attended to. One
compiled program: a prefill of the P prompt tokens writes every layer's keys and values into a
cache of P + N slots ([layers, B, P+N, H, K]), then a `lax.while_loop` feeds one token at a time,
attending over the cache, until every row has emitted the stop id (the family's closer: </s> for
causal, [SEP] for hybrid runs, which attend causally as their causal rows did in training) or N
new tokens. Temperature 0 is greedy; otherwise top-k, then top-p (nucleus) filtering, then a draw
keyed by `fold_in(key, i)` for the i-th new token: the same key gives the same text.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from babylm_jax.core.families import family_spec
from babylm_jax.core.vocab import MASK_ID, PAD_ID, SPECIAL_PIECES, UNK_ID
from babylm_jax.model import attention, layers
from babylm_jax.model.transformer import Block, Transformer

MASK_PIECE = SPECIAL_PIECES[MASK_ID]  # "[MASK]": how a prompt marks a token to fill


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How new tokens are chosen (hashable: a static argument of the compiled program)."""

    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 = greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches p; 1 = all


@dataclasses.dataclass(frozen=True)
class Prompts:
    """Prompts as one left-padded batch, and what a user should be told about them."""

    tokens_BxP: np.ndarray  # int32, the opener first, padding (PAD_ID) on the left
    pads_B: np.ndarray  # int32, padding slots of each row
    notes: tuple[str, ...]  # unknown characters, prompts cut to fit


def unknown_characters(tokenizer: Any, text: str) -> list[str]:
    """The characters of `text` that the tokenizer turns into its unknown id (none with byte fallback)."""
    if tokenizer.unk_id is None:
        return []
    return list(dict.fromkeys(ch for ch in text if UNK_ID in tokenizer.encode(ch)))


def encode_prompts(tokenizer: Any, prompts: Sequence[str], family: str, room: int) -> Prompts:
    """`prompts` framed with the family's opener, each kept to its last `room` tokens, left-padded."""
    opener = family_spec(family).framing.opener_id
    rows, notes = [], []
    for prompt in prompts:
        if not prompt.strip():
            raise ValueError("an empty prompt: give each prompt some text")
        missing = unknown_characters(tokenizer, prompt)
        if missing:
            notes.append(f"prompt {prompt!r}: {', '.join(map(repr, missing))} not in the vocabulary, "
                         f"read as the unknown id {SPECIAL_PIECES[UNK_ID]}")
        ids = [opener, *tokenizer.encode(prompt)]
        if len(ids) > room:
            notes.append(f"prompt {prompt!r}: {len(ids)} tokens with the opener, more than the {room} that fit "
                         f"beside the new tokens in the model's length; kept its last {room}")
            ids = ids[-room:]
        rows.append(ids)
    width = max(len(ids) for ids in rows)
    tokens = np.full((len(rows), width), PAD_ID, np.int32)
    for row, ids in zip(tokens, rows):
        row[width - len(ids):] = ids
    return Prompts(tokens, np.asarray([width - len(ids) for ids in rows], np.int32), tuple(notes))


def continuations(tokenizer: Any, new_BxN: np.ndarray, stop_id: int) -> list[str]:
    """Each row's new tokens up to the stop id (or padding), as text."""
    texts = []
    for row in np.asarray(new_BxN).tolist():
        ended = [i for i, t in enumerate(row) if t in (stop_id, PAD_ID)]
        texts.append(tokenizer.decode(row[: ended[0]] if ended else row))
    return texts


def layer_stack(params: Any, model: Transformer) -> Any:
    """The blocks' parameters with a leading layer axis ([N, ...]), scanned (`model.scan_layers`) or not."""
    inner = params["params"]
    if "layers" in inner:
        return inner["layers"]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[inner[f"layers_{i}"] for i in range(model.config.num_layers)])


def forward_cached(model: Transformer, params: Any, blocks: Any, tokens_BxT: jax.Array, positions_BxT: jax.Array,
                   allowed_Bx1xTxS: jax.Array, caches: tuple[jax.Array, jax.Array],
                   start: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Logits [B, V] after the last of T new tokens written at slots start.. of the caches
    ([N, B, S, H, K] keys and values), and the updated caches."""
    c = model.config
    x_BxTxD = layers.embed_tokens(params["params"]["embed"]["embedding"], tokens_BxT).astype(c.stream_dtype)
    rope = layers.rope_angles(positions_BxT, c.d_model // c.num_heads, c.rope_theta, c.max_len)
    mask, block = attention.Mask(allowed_Bx1xTxS), Block(c)

    def one_layer(x, layer):
        block_params, k, v = layer
        x, cache = block.apply({"params": block_params}, x, rope, mask, True, layers.KVCache(k, v, start))
        return x, (cache.k_BxSxHxK, cache.v_BxSxHxK)

    x_BxTxD, caches = jax.lax.scan(one_layer, x_BxTxD, (blocks, *caches))
    hidden_BxD = model.apply(params, x_BxTxD[:, -1], method=lambda m, h: m.final_norm(h))
    return model.apply(params, hidden_BxD, method=Transformer.project), caches


def next_tokens(logits_BxV: jax.Array, key: jax.Array, sampling: Sampling) -> jax.Array:
    """One token per row: the argmax at temperature 0, else a draw after top-k and top-p filtering."""
    if sampling.temperature == 0:
        return jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    logits_BxV = logits_BxV.astype(jnp.float32) / sampling.temperature
    floor = jnp.finfo(jnp.float32).min
    if sampling.top_k:
        kth_Bx1 = jax.lax.top_k(logits_BxV, min(sampling.top_k, logits_BxV.shape[-1]))[0][:, -1:]
        logits_BxV = jnp.where(logits_BxV < kth_Bx1, floor, logits_BxV)
    if sampling.top_p < 1:
        sorted_BxV = jnp.sort(logits_BxV, axis=-1)[:, ::-1]
        probs_BxV = jax.nn.softmax(sorted_BxV, axis=-1)
        before_BxV = jnp.cumsum(probs_BxV, axis=-1) - probs_BxV  # the mass of the more likely tokens
        cutoff_Bx1 = jnp.min(jnp.where(before_BxV < sampling.top_p, sorted_BxV, jnp.inf), axis=-1, keepdims=True)
        logits_BxV = jnp.where(logits_BxV < cutoff_Bx1, floor, logits_BxV)
    return jax.random.categorical(key, logits_BxV, axis=-1).astype(jnp.int32)


def within_vocabulary(logits_BxV: jax.Array, vocab_size: int) -> jax.Array:
    """The logits with the ids the tokenizer lacks (at or above `vocab_size`, a model's vocabulary may be
    larger) at the float32 floor: never chosen."""
    if vocab_size >= logits_BxV.shape[-1]:
        return logits_BxV
    return jnp.where(jnp.arange(logits_BxV.shape[-1]) < vocab_size, logits_BxV, jnp.finfo(jnp.float32).min)


def _generate(model: Transformer, sampling: Sampling, stop_id: int, vocab_size: int, params: Any,
              tokens_BxP: jax.Array, pads_B: jax.Array, key: jax.Array) -> jax.Array:
    c = model.config
    b, p = tokens_BxP.shape
    n = sampling.max_new_tokens
    slots_S = jnp.arange(p + n)
    valid_BxS = slots_S[None] >= pads_B[:, None]
    blocks = layer_stack(params, model)
    shape = (c.num_layers, b, p + n, c.num_heads, c.d_model // c.num_heads)
    empty = (jnp.zeros(shape, c.compute_dtype), jnp.zeros(shape, c.compute_dtype))

    def step(tokens_BxT, start, caches):
        query_slots_T = start + jnp.arange(tokens_BxT.shape[1])
        positions_BxT = jnp.maximum(query_slots_T[None] - pads_B[:, None], 0)
        allowed = valid_BxS[:, None, :] & (slots_S[None, None, :] <= query_slots_T[None, :, None])
        logits_BxV, caches = forward_cached(model, params, blocks, tokens_BxT, positions_BxT, allowed[:, None],
                                            caches, start)
        return within_vocabulary(logits_BxV, vocab_size), caches

    logits_BxV, caches = step(tokens_BxP, jnp.int32(0), empty)  # the prefill
    first_B = next_tokens(logits_BxV, jax.random.fold_in(key, 0), sampling)
    new_BxN = jnp.full((b, n), PAD_ID, jnp.int32).at[:, 0].set(first_B)

    def unfinished(carry):
        i, _, _, done_B = carry
        return (i < n) & ~jnp.all(done_B)

    def one_token(carry):
        i, new_BxN, caches, done_B = carry
        last_Bx1 = jax.lax.dynamic_slice_in_dim(new_BxN, i - 1, 1, axis=1)
        logits_BxV, caches = step(last_Bx1, p + i - 1, caches)
        token_B = jnp.where(done_B, PAD_ID, next_tokens(logits_BxV, jax.random.fold_in(key, i), sampling))
        new_BxN = jax.lax.dynamic_update_slice_in_dim(new_BxN, token_B[:, None], i, axis=1)
        return i + 1, new_BxN, caches, done_B | (token_B == stop_id)

    carry = (jnp.int32(1), new_BxN, caches, first_B == stop_id)
    return jax.lax.while_loop(unfinished, one_token, carry)[1]


def make_generate(model: Transformer, sampling: Sampling, stop_id: int, vocab_size: int,
                  out_shardings: Any = None) -> Callable:
    """The jitted `(params, tokens_BxP, pads_B, key) -> new tokens [B, N]` (PAD_ID after a row's stop id),
    ids below `vocab_size` (the tokenizer's); `out_shardings` as jax.jit takes it (a run on a mesh:
    replicated, for every process to read)."""
    return jax.jit(functools.partial(_generate, model, sampling, stop_id, vocab_size), out_shardings=out_shardings)


def mask_positions(tokenizer: Any, prompt: str, family: str) -> tuple[list[int], list[int]]:
    """The framed ids of a prompt whose [MASK]s stand for tokens to fill, and the masks' positions;
    ValueError for a prompt without one."""
    parts = prompt.split(MASK_PIECE)
    if len(parts) == 1:
        raise ValueError(f"prompt {prompt!r} has no {MASK_PIECE}: an mlm run fills masks, it does not continue "
                         f"text; put {MASK_PIECE} where a token should go (e.g. 北京是中国的{MASK_PIECE}都)")
    ids: list[int] = []
    for i, part in enumerate(parts):
        if i:
            ids.append(MASK_ID)
        ids += tokenizer.encode(part)
    framed = family_spec(family).framing.frame(ids)
    return framed, [i for i, t in enumerate(framed) if t == MASK_ID]


def make_fill(model: Transformer, top: int, vocab_size: int) -> Callable:
    """The jitted `(params, tokens_BxL) -> (probabilities, ids)`, each [B, L, top]: the most likely
    tokens (ids below `vocab_size`) at every position with bidirectional attention (read at the [MASK]s)."""

    def fill(params, tokens_BxL):
        segment_ids_BxL = (tokens_BxL != PAD_ID).astype(jnp.int32)
        logits_BxLxV = within_vocabulary(model.apply(params, tokens_BxL, segment_ids_BxL, causal=False), vocab_size)
        return jax.lax.top_k(jax.nn.softmax(logits_BxLxV, axis=-1), top)

    return jax.jit(fill)
