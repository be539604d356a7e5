"""Text samples during training: each of `train.sample_prompts` continued greedily at every eval.

    samples = RunSamples.for_run(run)        # None when off; compiles the decode program now (before step 1)
    rows = samples.sample(step, params)      # [{"step", "prompt", "text"}], appended to samples.jsonl

The decode is `model.decode`'s KV-cache program at temperature 0, so a prompt's text changes only
as the model does; `train.sample_max_new_tokens` new tokens at most (and half the model's length). Causal and hybrid runs (a
hybrid attends causally, as its causal rows train); an mlm run writes no text, and says so once.
The rows also go to TensorBoard's text tab and W&B (`core.writers.RunWriters.samples`).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import numpy as np

from babylm_jax.core import rundir
from babylm_jax.core.families import family_spec
from babylm_jax.model import decode
from babylm_jax.training import sharding
from babylm_jax.training.compiled import Program, compile_program
from babylm_jax.training.run import Run

SEED = 0  # greedy decoding draws nothing; the program still takes a key


class RunSamples:
    """The prompts as one batch and the decode program compiled for them."""

    def __init__(self, run: Run, prompts: decode.Prompts, program: Program, stop_id: int):
        self.run, self.prompts, self.program, self.stop_id = run, prompts, program, stop_id
        self.texts = list(run.config.train.sample_prompts)
        self.path = os.path.join(run.place.local, rundir.SAMPLES)
        self.seconds = 0.0  # decoding at evals, all of them

    @classmethod
    def for_run(cls, run: Run, params: Any) -> "RunSamples | None":
        """The samples `train.sample_prompts` asks for, compiled for `params` (the eval params); None when off."""
        train, model = run.config.train, run.model
        if not train.sample_prompts:
            return None
        spec = family_spec(model.config.family)
        if not (spec.causal or spec.causal_rows):
            if run.is_main:
                print("[train] samples off: an mlm run continues no text (train.sample_prompts is for causal and "
                      "hybrid runs; `python -m babylm_jax.sample` fills [MASK]s)", flush=True)
            return None
        new_tokens = min(train.sample_max_new_tokens, model.config.max_len // 2)
        room = model.config.max_len - new_tokens
        prompts = decode.encode_prompts(run.data.tokenizer, train.sample_prompts, model.config.family, room)
        if run.is_main:
            for note in prompts.notes:
                print(f"[train] train.sample_prompts: {note}", flush=True)
        sampling = decode.Sampling(max_new_tokens=new_tokens, temperature=0.0)
        stop_id = spec.framing.closer_id
        generate = decode.make_generate(model, sampling, stop_id, run.data.tokenizer.vocab_size,
                                        out_shardings=sharding.replicated(run.mesh))
        rows, width = prompts.tokens_BxP.shape
        program = compile_program(f"sample decode, {rows} prompts x {width} + {sampling.max_new_tokens} tokens",
                                  generate, params, prompts.tokens_BxP, prompts.pads_B, jax.random.key(SEED))
        if run.is_main:
            print(program.describe(), flush=True)
        return cls(run, prompts, program, stop_id)

    def sample(self, step: int, params: Any) -> list[dict]:
        """Each prompt's continuation under `params`, appended to samples.jsonl (process 0)."""
        start = time.perf_counter()
        new_BxN = self.program.executable(params, self.prompts.tokens_BxP, self.prompts.pads_B, jax.random.key(SEED))
        texts = decode.continuations(self.run.data.tokenizer, np.asarray(jax.device_get(new_BxN)), self.stop_id)
        self.seconds += time.perf_counter() - start
        rows = [{"step": step, "prompt": prompt, "text": text} for prompt, text in zip(self.texts, texts)]
        if self.run.is_main:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return rows
