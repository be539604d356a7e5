"""Writes a complete Hugging Face export directory, atomically.

Everything goes into a temporary directory beside the output, which is renamed into place
only when complete; an existing non-empty output is refused unless `overwrite`, and with it
where it holds anything an earlier export did not write (a user's notes), named.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any, Mapping

from babylm_jax.core.atomic import atomic_dir
from babylm_jax.hf import fast_tokenizer, hf_config, model_card, weights
from babylm_jax.config.model import ModelConfig

CODE_DIR = pathlib.Path(__file__).parent


MARKER = ".babylm_export"  # in every export directory: what `--overwrite` may replace (its "files")
_SHIPPED_CODE = ("configuration_", "modeling_", "tokenization_")  # the code files an export may ship from hf/
_EARLIER_FILES = ("config.json", "model.safetensors", "README.md", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "vocab.json")  # what an export whose MARKER lists no files wrote


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool) -> pathlib.Path:
    """The output path; refuses a file, a non-empty directory without `overwrite`, and with it any non-empty
    directory that an export did not write (it holds no MARKER) or that holds what the export did not write."""
    output = pathlib.Path(output_dir).absolute()
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"--output {output} exists and is not a directory")
    if output.is_dir() and any(output.iterdir()):
        if not overwrite:
            raise FileExistsError(f"--output {output} exists and is not empty; pass --overwrite to replace it")
        if not (output / MARKER).is_file():
            raise FileExistsError(f"--output {output} was not written by export (it has no {MARKER}), so --overwrite "
                                  "will not replace it; remove it yourself or choose another --output")
        others = sorted(p.name for p in output.iterdir() if p.name not in _written_files(output))
        if others:
            more = f" (and {len(others) - 3} more)" if len(others) > 3 else ""
            raise FileExistsError(f"--output {output} holds {', '.join(others[:3])}{more}, which export did not write: "
                                  "--overwrite replaces only an export's own files; move them out of it, or choose "
                                  "another --output")
    return output


def _written_files(output: pathlib.Path) -> set[str]:
    """The names the export in `output` wrote: its MARKER's list; for an export older than the list, every
    name an export wrote then."""
    try:
        files = json.loads((output / MARKER).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        files = None
    if not isinstance(files, list):
        files = [*_EARLIER_FILES, *(p.name for p in CODE_DIR.glob("*.py") if p.name.startswith(_SHIPPED_CODE))]
    return {MARKER, *map(str, files)}


def tokenizer_summary(tokenizer: Any) -> str:
    kind = getattr(tokenizer, "kind", type(tokenizer).__name__)
    return (
        f"{kind} tokenizer, vocabulary {tokenizer.vocab_size}, byte fallback "
        f"{'on' if getattr(tokenizer, 'byte_fallback', False) else 'off'}; special ids "
        f"{' '.join(f'{name}={i}' for name, i in hf_config.SPECIAL_IDS.items())}. Causal inputs are `<s> text </s>` "
        "(pairs `<s> a </s> b </s>`); mlm/hybrid `[CLS] text [SEP]` (pairs `[CLS] a [SEP] b [SEP]`), as in training."
    )


def write_export(
    output_dir: str | os.PathLike,
    config: ModelConfig,
    params: Mapping[str, Any],
    tokenizer: Any,
    *,
    provenance: Mapping[str, Any],
    run_config: Mapping[str, Any] | None = None,
    results: Mapping[str, Any] | None = None,
    layer: int | None = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Writes config.json, model.safetensors, the fast tokenizer, remote code if needed and README.md.

    `params` are unboxed float params of `Transformer(config)`; `layer` picks the hidden
    state AutoModel returns as `last_hidden_state` (default: the final normed output).
    """
    output = check_output_dir(output_dir, overwrite)
    output_layer = hf_config.resolve_output_layer(config, layer)
    config_json = hf_config.hf_config(config, output_layer, dict(provenance))
    tensors = weights.hf_state_dict(params, config)
    tokenizer_texts = fast_tokenizer.tokenizer_texts(tokenizer, config.family, config.max_len)
    card = model_card.model_card(
        run_config or {}, config_json, tokenizer_summary(tokenizer), provenance, results
    )

    with atomic_dir(output, replace=True) as staging:
        (staging / "config.json").write_text(json.dumps(config_json, indent=2, ensure_ascii=False) + "\n")
        weights.save_safetensors(tensors, staging / "model.safetensors")
        for name, text in tokenizer_texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        if config_json["model_type"] != "llama":
            for name in hf_config.remote_code_files(config.family):
                shutil.copyfile(CODE_DIR / name, staging / name)
        generation = hf_config.generation_config(config.family)
        if generation is not None:
            (staging / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        (staging / "README.md").write_text(card, encoding="utf-8")
        files = sorted(p.name for p in staging.iterdir())
        marker = {"written_by": "babylm_jax.export", **provenance, "files": files}
        (staging / MARKER).write_text(json.dumps(marker) + "\n")
    return output
