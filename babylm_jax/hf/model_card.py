"""The README.md model card of an export: data and words seen, tokenizer, recipe, results."""
from __future__ import annotations

from typing import Any, Mapping

from babylm_jax.core.families import family_spec

RECIPE_KEYS = (
    "num_steps", "batch_size", "seq_len", "optimizer", "learning_rate", "schedule", "warmup_steps",
    "weight_decay", "ema_decay", "mask_rate", "hybrid_causal_share",
)


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    return ["| | |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows)]


def _results_table(results: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = ["| task | metric | value |", "|---|---|---|"]
    for task, values in sorted(results.items()):
        for metric, value in sorted(values.items()):
            shown = f"{value:.4f}" if isinstance(value, (int, float)) else str(value)
            lines.append(f"| {task} | {metric} | {shown} |")
    return lines


def _data_rows(data: Mapping[str, Any], provenance: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The model card's "Training data" table: the corpus and how much of it the model saw."""
    words = provenance.get("words_seen")
    return [
        ("corpus", data.get("corpus", "?")),
        ("extra paths", ", ".join(map(str, data.get("paths", []))) or "none"),
        ("words seen (jieba)", f"{words:,.0f}" if isinstance(words, (int, float)) else "?"),
        ("tokens seen", f"{provenance.get('tokens_seen', 0):,}"),
        ("checkpoint step", provenance.get("step", "?")),
        ("EMA params", provenance.get("used_ema", "?")),
    ]


def model_card(
    run_config: Mapping[str, Any],
    hf_config: Mapping[str, Any],
    tokenizer_summary: str,
    provenance: Mapping[str, Any],
    results: Mapping[str, Any] | None,
) -> str:
    """Markdown text of README.md; `run_config` is the run's config as a plain dict."""
    model, data, train = run_config.get("model", {}), run_config.get("data", {}), run_config.get("train", {})
    family = model.get("family", hf_config["babylm_jax"]["family"])
    spec = family_spec(family)
    auto_class = spec.hf_models[0][0]
    remote = hf_config["model_type"] != "llama"
    trust = ", trust_remote_code=True" if remote else ""
    lines = [
        "---",
        "language: zh",
        "library_name: transformers",
        "tags: [babylm, chinese-babylm, babylm_jax]",
        "---",
        f"# {family} language model trained with babylm_jax",
        "",
        "A model trained from scratch for the Chinese BabyLM Challenge (<= 102M words counted with jieba 0.42.1).",
        "",
        "## Training data",
        *_table(_data_rows(data, provenance)),
        "",
        "## Model",
        *_table([
            ("family", family),
            ("architecture", hf_config["architectures"][0] + (" (remote code in this folder)" if remote else "")),
            ("layers / width / heads / MLP width", f"{model.get('num_layers')} / {model.get('d_model')} / "
                                                  f"{model.get('num_heads')} / {model.get('d_ff')}"),
            ("MLP / norm / RoPE theta", f"{model.get('mlp')} / {model.get('norm')} / {model.get('rope_theta')}"),
            ("AutoModel last_hidden_state", f"hidden_states[{hf_config['babylm_jax']['output_layer']}]"),
        ]),
        "",
        "## Tokenizer",
        tokenizer_summary,
        "",
        "## Recipe",
        *_table([(key, train[key]) for key in RECIPE_KEYS if key in train]),
        "",
        "## Results (babylm_jax evaluate)",
        *(_results_table(results) if results else ["No results.json was found in the run directory."]),
        "",
        "## Use",
        "```python",
        f"from transformers import AutoTokenizer, {auto_class}",
        f"tokenizer = AutoTokenizer.from_pretrained(path{trust})",
        f"model = {auto_class}.from_pretrained(path{trust})",
        "```",
        f"Official evaluation pipeline backend: `--backend {spec.official_backend}`.",
        "",
    ]
    return "\n".join(lines)
