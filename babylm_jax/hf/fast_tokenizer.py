"""Our tokenizer -> a Hugging Face fast tokenizer (tokenizer.json + config files) with the same ids.

One entry per tokenizer kind in EXPORTS, keyed as `corpus.tokenizer_kinds.KINDS` (a test holds them equal):
- SentencePiece unigram: a `tokenizers` Unigram over the model's pieces and scores.
- SentencePiece BPE: a `tokenizers` BPE whose merges are every split of a piece into two
  pieces, ranked by the merged piece's score (SentencePiece merges the best-scoring pair).
- char: a BPE with no merges, so every character is looked up alone; characters outside
  the vocabulary become UTF-8 byte pieces (byte fallback) or one UNK each.
Both SentencePiece kinds use identity normalisation with spaces escaped as U+2581 and no
dummy prefix, as our training sets them; a unigram with byte fallback also splits off the
characters no piece contains, so their byte pieces get per-character offsets as ours do.
Special pieces written in the text ("[MASK]", "<s>") are read as special tokens, as
transformers' fill-mask expects (our tokenizer reads them as plain text). Templates frame
a text as the family trains (`core.families`): causal `<s> A </s>` (pairs
`<s> A </s> B </s>`), mlm/hybrid `[CLS] A [SEP]` (pairs `[CLS] A [SEP] B [SEP]`). Offsets are character spans; byte pieces share their
character's span.

The "words" kind cuts text with jieba, which `tokenizers` cannot: its export is the slow tokenizer
class in tokenization_babylm_words.py, shipped beside the files and named by tokenizer_config.json's
auto_map (`AutoTokenizer.from_pretrained(path, trust_remote_code=True)`), with every piece in id order
in vocab.json.

Needs the `tokenizers` package (the "export" extra).
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import tempfile
from typing import Any, Callable

import sentencepiece as spm

from babylm_jax.core.families import family_spec
from babylm_jax.core.vocab import SPECIAL_PIECES
from babylm_jax.hf.hf_config import SPECIAL_IDS

SPACE = "\u2581"
SPECIAL_TOKENS = {  # transformers attribute -> (piece, id), as babylm_jax.corpus.tokenizer fixes them
    f"{name}_token": (SPECIAL_PIECES[i], i) for name, i in SPECIAL_IDS.items()
}


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as error:
        raise ImportError(
            "Writing the fast tokenizer needs the `tokenizers` package: pip install -e '.[export]'"
        ) from error
    return tokenizers


def _saved_model(tokenizer: Any) -> tuple[dict, bytes]:
    """Our tokenizer's saved metadata and model file, through its public `save`."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(tmp)
        meta = json.loads((pathlib.Path(tmp) / "tokenizer.json").read_text())
        return meta, (pathlib.Path(tmp) / meta["model_file"]).read_bytes()


def _pieces(proto: bytes) -> tuple[Any, list[str]]:
    sp = spm.SentencePieceProcessor(model_proto=proto)
    return sp, [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _unigram_model(tokenizers: Any, proto: bytes, byte_fallback: bool) -> Any:
    sp, pieces = _pieces(proto)
    vocab = [(piece, sp.get_score(i)) for i, piece in enumerate(pieces)]
    return tokenizers.models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=byte_fallback)


def _bpe_model(tokenizers: Any, proto: bytes, byte_fallback: bool) -> Any:
    sp, pieces = _pieces(proto)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    mergeable = {p: i for i, p in enumerate(pieces) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))}
    merges = []
    for piece, i in mergeable.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                merges.append((-sp.get_score(i), i, mergeable[left], mergeable[right], left, right))
    merges.sort()
    return tokenizers.models.BPE(
        vocab, [(m[4], m[5]) for m in merges], unk_token=pieces[sp.unk_id()],
        byte_fallback=byte_fallback, fuse_unk=True,
    )


def _isolate_unknown_characters(tokenizers: Any, proto: bytes) -> Any:
    """A pre-tokenizer that splits off every character no piece contains.

    Exact for ids (no piece spans such a character, so Viterbi is unchanged), and it gives
    each character's byte pieces that character's span, where `tokenizers` would give a run
    of unknown characters the span of the whole run.
    """
    sp = spm.SentencePieceProcessor(model_proto=proto)
    known = set()
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i)):
            known.update(sp.id_to_piece(i))
    pattern = "[^" + "".join(f"\\x{{{ord(c):X}}}" for c in sorted(known)) + "]"
    return tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated")


def _decoder(tokenizers: Any, spaces: bool) -> Any:
    """Byte pieces back to characters, and (SentencePiece kinds: `spaces`) U+2581 back to a space."""
    steps = [tokenizers.decoders.ByteFallback(), tokenizers.decoders.Fuse()]
    return tokenizers.decoders.Sequence(([tokenizers.decoders.Replace(SPACE, " ")] if spaces else []) + steps)


def _sentencepiece_fast(tokenizers: Any, model: Any) -> Any:
    fast = tokenizers.Tokenizer(model)
    fast.normalizer = tokenizers.normalizers.Replace(" ", SPACE)
    fast.decoder = _decoder(tokenizers, spaces=True)
    return fast


def _unigram_fast(tokenizers: Any, tokenizer: Any, model_file: bytes) -> Any:
    fast = _sentencepiece_fast(tokenizers, _unigram_model(tokenizers, model_file, tokenizer.byte_fallback))
    if tokenizer.byte_fallback:
        fast.pre_tokenizer = _isolate_unknown_characters(tokenizers, model_file)
    return fast


def _bpe_fast(tokenizers: Any, tokenizer: Any, model_file: bytes) -> Any:
    return _sentencepiece_fast(tokenizers, _bpe_model(tokenizers, model_file, tokenizer.byte_fallback))


def _char_fast(tokenizers: Any, tokenizer: Any, model_file: bytes) -> Any:
    vocab = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    fast = tokenizers.Tokenizer(tokenizers.models.BPE(
        vocab, [], unk_token=SPECIAL_TOKENS["unk_token"][0], byte_fallback=tokenizer.byte_fallback, fuse_unk=False
    ))
    fast.decoder = _decoder(tokenizers, spaces=False)
    return fast


def _check_special_pieces(tokenizer: Any) -> None:
    """Refuses a tokenizer whose special ids are not the fixed pieces the exported files name."""
    for attribute, (piece, i) in SPECIAL_TOKENS.items():
        if tokenizer.id_to_piece(i) != piece:
            raise ValueError(f"tokenizer id {i} is {tokenizer.id_to_piece(i)!r}, expected {piece!r} ({attribute})")


def build_fast_tokenizer(tokenizer: Any, family: str) -> Any:
    """A `tokenizers.Tokenizer` giving the same ids (and character offsets) as `tokenizer`."""
    tokenizers = _import_tokenizers()
    meta, model_file = _saved_model(tokenizer)
    _check_special_pieces(tokenizer)
    build = EXPORTS[meta["kind"]].fast
    if build is None:
        raise ValueError(f"tokenizer kind {meta['kind']!r} has no fast tokenizer (known: "
                         f"{', '.join(kind for kind, export in EXPORTS.items() if export.fast)}; "
                         "the words kind exports the slow tokenizer of tokenizer_texts)")
    fast = build(tokenizers, tokenizer, model_file)
    single, pair = family_spec(family).framing.hf_templates()
    fast.post_processor = tokenizers.processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(piece, i) for piece, i in SPECIAL_TOKENS.values()]
    )
    fast.add_special_tokens([
        tokenizers.AddedToken(piece, special=True, normalized=False) for piece, _ in SPECIAL_TOKENS.values()
    ])
    return fast


def _fast_tokenizer_files(tokenizer: Any, family: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A kind with a fast tokenizer: tokenizer.json, read by PreTrainedTokenizerFast."""
    return ({"tokenizer_class": "PreTrainedTokenizerFast"},
            {"tokenizer.json": build_fast_tokenizer(tokenizer, family).to_str(pretty=True)})


def _word_tokenizer_files(tokenizer: Any, family: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The "words" kind: tokenizer_config.json's own keys and the files beside it (vocabulary and class)."""
    from babylm_jax.hf import tokenization_babylm_words as word_export  # transformers only for this kind

    framing = family_spec(family).framing
    config = {
        "tokenizer_class": word_export.BabyLMWordTokenizer.__name__,
        "auto_map": {"AutoTokenizer": [f"{word_export.__name__.rpartition('.')[2]}.BabyLMWordTokenizer", None]},
        "byte_fallback": bool(tokenizer.byte_fallback),
        "frame_opener": SPECIAL_PIECES[framing.opener_id],
        "frame_closer": SPECIAL_PIECES[framing.closer_id],
    }
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return config, {word_export.VOCAB_FILE: json.dumps(pieces, ensure_ascii=False),
                    pathlib.Path(word_export.__file__).name: pathlib.Path(word_export.__file__).read_text(encoding="utf-8")}


def tokenizer_texts(tokenizer: Any, family: str, max_len: int) -> dict[str, str]:
    """File name -> text of the tokenizer's files: tokenizer.json (the "words" kind: vocab.json and its class's
    code), tokenizer_config.json and special_tokens_map.json."""
    _check_special_pieces(tokenizer)
    own, files = EXPORTS[tokenizer.kind].files(tokenizer, family)
    special = {attribute: piece for attribute, (piece, _) in SPECIAL_TOKENS.items()}
    config = {
        **own,
        **special,
        "model_max_length": max_len,
        "padding_side": "right",
        "truncation_side": "right",
        "model_input_names": ["input_ids", "attention_mask"],
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {"content": piece, "special": True, "normalized": False, "lstrip": False, "rstrip": False,
                     "single_word": False}
            for piece, i in SPECIAL_TOKENS.values()
        },
    }
    return {
        **files,
        "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2),
        "special_tokens_map.json": json.dumps(special, ensure_ascii=False, indent=2),
    }


@dataclasses.dataclass(frozen=True)
class TokenizerExport:
    """How one tokenizer kind is exported: the files beside the model (`files(tokenizer, family)` -> tokenizer_config.json's
    own keys, file name -> text) and, for a kind `tokenizers` can express, its fast tokenizer without the framing
    (`fast(tokenizers, tokenizer, model_file)`: model, normalizer, pre-tokenizer, decoder)."""

    files: Callable[[Any, str], tuple[dict[str, Any], dict[str, str]]] = _fast_tokenizer_files
    fast: Callable[[Any, Any, bytes], Any] | None = None


EXPORTS: dict[str, TokenizerExport] = {  # a key of corpus.tokenizer_kinds.KINDS -> its export
    "unigram": TokenizerExport(fast=_unigram_fast),
    "bpe": TokenizerExport(fast=_bpe_fast),
    "char": TokenizerExport(fast=_char_fast),
    "words": TokenizerExport(files=_word_tokenizer_files),  # jieba cuts, which `tokenizers` cannot: the slow class
}
