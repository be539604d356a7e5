"""Prints what a trained model writes: continuations of prompts (causal, hybrid), or fills of [MASK]s (mlm).

    python -m babylm_jax.sample --workdir runs/base --prompt "今天天气" [--prompt ... | --prompts FILE] \\
        [--max_new_tokens 64] [--temperature 0.8] [--top_k K] [--top_p P] [--num_samples S] [--seed 0] \\
        [--step N | --milestone 10M] [--use_ema=auto|yes|no]
    python -m babylm_jax.sample --workdir runs/mlm --prompt "北京是中国的[MASK]都" [--top_k 5]

Causal and hybrid runs generate left to right (a hybrid attends causally, as its causal rows
trained) with a KV cache, all prompts in one left-padded batch, one compiled program
(`model.decode`); a row ends at the family's closer (</s>, or [SEP] for a hybrid) or after
--max_new_tokens. --temperature 0 is greedy; the same --seed gives the same text. An mlm run
lists the --top_k (default 5) most likely tokens, with their probabilities, for each [MASK].
The EMA params are used where the run kept them. A user error is one line and exit status 2
(`babylm_jax.config.cli`).
"""
from __future__ import annotations

import math
import pathlib
import re
from typing import Any, Sequence

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core import remote, rundir
from babylm_jax.core.families import family_spec

COMMAND = cli.Command("sample", __doc__)
_CHECKPOINT = cli.CheckpointFlags.define(COMMAND, "Sample with")
_PROMPT = flags.DEFINE_multi_string("prompt", [], "A prompt (repeat the flag for more).", flag_values=COMMAND.flags)
_PROMPTS = flags.DEFINE_string("prompts", None, "A UTF-8 file of prompts, one a line.", flag_values=COMMAND.flags)
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", None, "New tokens at most per sample (default 64, or half "
                                       "the model's length if less).", flag_values=COMMAND.flags)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "Softmax temperature; 0 = greedy.", flag_values=COMMAND.flags)
_TOP_K = flags.DEFINE_integer("top_k", 0, "Draw from the K most likely tokens (0 = all); mlm: fills listed per "
                              "[MASK] (0 = 5).", flag_values=COMMAND.flags)
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Draw from the most likely tokens whose probability reaches P, in (0, 1].",
                            flag_values=COMMAND.flags)
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Samples per prompt.", flag_values=COMMAND.flags)
_SEED = flags.DEFINE_integer("seed", 0, "Random seed of the draws.", flag_values=COMMAND.flags)
_MILESTONE = flags.DEFINE_string("milestone", None, "The word-milestone checkpoint that first saw W words "
                                 "(e.g. 10M, 500K, 2000000) instead of --step.", flag_values=COMMAND.flags)
DEFAULT_FILLS = 5
DEFAULT_NEW_TOKENS = 64
WORD_UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}


def read_prompts(given: Sequence[str], path: str | None) -> list[str]:
    """The --prompt values, then the lines of --prompts; an empty one or none at all is a ValueError."""
    prompts = list(given)
    if path is not None:
        file = pathlib.Path(rundir.local_path(path, "--prompts"))
        if not file.is_file():
            raise FileNotFoundError(f"--prompts {path}: file not found")
        prompts += [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise ValueError("no prompt: give --prompt TEXT (repeatable) or --prompts FILE")
    for prompt in given:
        if not prompt.strip():
            raise ValueError("--prompt '': an empty prompt; give it some text")
    return prompts


def parse_words(text: str) -> float:
    """A word count such as 10M, 1.5M, 500K or 2000000."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMB]?)\s*", text.upper())
    if not match:
        raise ValueError(f"--milestone {text!r}: give a word count such as 10M, 500K or 2000000")
    return float(match.group(1)) * WORD_UNITS[match.group(2)]


def check_settings(max_len: int) -> int:
    """The sampling flags against each other and the model's length (ValueError naming the flag); the
    new tokens at most."""
    if _TEMPERATURE.value < 0 or not math.isfinite(_TEMPERATURE.value):
        raise ValueError(f"--temperature {_TEMPERATURE.value}: must be >= 0 (0 = greedy)")
    if not 0 < _TOP_P.value <= 1:
        raise ValueError(f"--top_p {_TOP_P.value}: must be in (0, 1]")
    if _TOP_K.value < 0:
        raise ValueError(f"--top_k {_TOP_K.value}: must be >= 0 (0 = all tokens)")
    if _NUM_SAMPLES.value < 1:
        raise ValueError(f"--num_samples {_NUM_SAMPLES.value}: must be >= 1")
    if _MAX_NEW_TOKENS.value is None:
        return min(DEFAULT_NEW_TOKENS, max_len // 2)
    if not 1 <= _MAX_NEW_TOKENS.value <= max_len - 2:
        raise ValueError(f"--max_new_tokens {_MAX_NEW_TOKENS.value}: must be in [1, {max_len - 2}] (the model's "
                         f"length model.max_len={max_len} holds the prompt and the new tokens)")
    return _MAX_NEW_TOKENS.value


def generate(loaded: Any, prompts: list[str], max_new_tokens: int) -> list[dict]:
    """Samples of each prompt: [{"prompt", "sample", "text"}], printed as they come."""
    import jax

    from babylm_jax.model import decode

    config = loaded.config.model
    for prompt in prompts:
        if decode.MASK_PIECE in prompt:
            raise ValueError(f"prompt {prompt!r}: a {config.family} run continues text; {decode.MASK_PIECE} is "
                             "filled by mlm runs")
    rows = [p for p in prompts for _ in range(_NUM_SAMPLES.value)]
    batch = decode.encode_prompts(loaded.tokenizer, rows, config.family, config.max_len - max_new_tokens)
    for note in dict.fromkeys(batch.notes):
        print(f"[sample] {note}", flush=True)
    sampling = decode.Sampling(max_new_tokens, _TEMPERATURE.value, _TOP_K.value, _TOP_P.value)
    stop_id = family_spec(config.family).framing.closer_id
    run = decode.make_generate(loaded.model, sampling, stop_id, loaded.tokenizer.vocab_size)
    new_BxN = jax.device_get(run(loaded.params, batch.tokens_BxP, batch.pads_B, jax.random.key(_SEED.value)))
    texts = decode.continuations(loaded.tokenizer, new_BxN, stop_id)
    results = [{"prompt": p, "sample": i % _NUM_SAMPLES.value, "text": t} for i, (p, t) in enumerate(zip(rows, texts))]
    for row in results:
        print(f"{row['prompt']} → {row['text']}", flush=True)
    return results


def fill_masks(loaded: Any, prompts: list[str]) -> list[dict]:
    """The most likely fills of each [MASK]: [{"prompt", "fills": [[(token, probability), ...] per mask]}]."""
    import jax
    import numpy as np

    from babylm_jax.core.vocab import PAD_ID
    from babylm_jax.model import decode

    config, tokenizer = loaded.config.model, loaded.tokenizer
    framed = [decode.mask_positions(tokenizer, p, config.family) for p in prompts]
    for prompt in prompts:
        missing = decode.unknown_characters(tokenizer, prompt.replace(decode.MASK_PIECE, ""))
        if missing:
            print(f"[sample] prompt {prompt!r}: {', '.join(map(repr, missing))} not in the vocabulary, read as the "
                  "unknown id", flush=True)
    width = max(len(ids) for ids, _ in framed)
    if width > config.max_len:
        raise ValueError(f"a prompt of {width} tokens is longer than the model's length model.max_len={config.max_len}; "
                         "shorten it around its [MASK]s")
    tokens = np.full((len(framed), width), PAD_ID, np.int32)
    for row, (ids, _) in zip(tokens, framed):
        row[: len(ids)] = ids
    probs, ids = jax.device_get(decode.make_fill(loaded.model, _TOP_K.value or DEFAULT_FILLS, tokenizer.vocab_size)(loaded.params, tokens))
    results = []
    for b, (prompt, (_, positions)) in enumerate(zip(prompts, framed)):
        fills = [[(tokenizer.decode([int(i)]) or tokenizer.id_to_piece(int(i)), float(p))
                  for i, p in zip(ids[b, pos], probs[b, pos])] for pos in positions]
        results.append({"prompt": prompt, "fills": fills})
        print(prompt, flush=True)
        for n, fill in enumerate(fills, 1):
            print(f"  {decode.MASK_PIECE} {n}: " + "  ".join(f"{token} {p:.3f}" for token, p in fill), flush=True)
    return results


def main(argv: Sequence[str]) -> list[dict]:
    """Parses `argv` (program name first), loads the checkpoint and prints the samples; returns them."""
    COMMAND.parse(argv)
    prompts = read_prompts(_PROMPT.value, _PROMPTS.value)
    run = _CHECKPOINT.workdir.value
    if not remote.is_remote(run) and not pathlib.Path(run).is_dir():
        raise FileNotFoundError(f"--workdir {run} does not exist (give a training run's directory)")
    if _MILESTONE.value is not None and _CHECKPOINT.step.value is not None:
        raise ValueError("--step and --milestone both choose the checkpoint: give one")
    place = remote.readable_run(run, rundir.READ_BY_EVALUATION)
    from babylm_jax.training.checkpoints import load_for_eval, milestone_for_words  # the heavy import, after the checks
    from babylm_jax.training.run_config import load_run_config

    max_new_tokens = check_settings(load_run_config(str(place.local)).model.max_len)
    step = _CHECKPOINT.step.value
    if _MILESTONE.value is not None:
        step = milestone_for_words(place.checkpoints_at, parse_words(_MILESTONE.value))
    loaded = load_for_eval(str(place.local), step=step, use_ema=_CHECKPOINT.ema(), checkpoints_at=place.checkpoints_at)
    family = loaded.config.model.family
    spec = family_spec(family)
    fills = not (spec.causal or spec.causal_rows)  # an encoder that never trained causal rows: it fills masks
    how = "greedy" if _TEMPERATURE.value == 0 else (f"temperature {_TEMPERATURE.value:g}, top_k {_TOP_K.value}, "
                                                   f"top_p {_TOP_P.value:g}, seed {_SEED.value}")
    params = "EMA params" if loaded.used_ema else "params"
    print(f"[sample] {run} step {loaded.step} ({params}), {family}: " + (
        "fills of [MASK]" if fills else f"{how}, up to {max_new_tokens} new tokens"), flush=True)
    return fill_masks(loaded, prompts) if fills else generate(loaded, prompts, max_new_tokens)


if __name__ == "__main__":
    COMMAND.run(main)
