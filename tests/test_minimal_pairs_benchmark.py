"""experiments/benchmarks/minimal_pairs_throughput.py's comparisons, run at a tiny size: the official scorer
(PyTorch, on the exported model) and the kernel give the same sentence scores, causal and PLL, and the
useful FLOPs count each variant's own units.

A benchmark whose two sides score different things prints speed ratios that are not true: when `Scoring`
became an enum, its `variant == "causal"` stayed False, so its official side scored a causal model as PLL
(max |kernel - official| = 10.1 nats) and it counted PLL's units for the causal kernel (3.1x the matmul peak).
"""
import pathlib

import numpy as np
import pytest
from fixtures.scripts import load_script

from babylm_jax.core.families import Scoring, family_spec
from babylm_jax.corpus.tokenizer import CharTokenizer
from babylm_jax.eval.zero_shot import scoring

ROOT = pathlib.Path(__file__).resolve().parents[1]
SENTENCES = ["他把杯子打碎了。", "杯子把他打碎了。", "我们去公园散步吧。", "我们去公园吧散步。", "小猫在睡觉。", "在小猫睡觉。"]
TINY = f"""import runpy


def get_config():
    config = runpy.run_path({str(ROOT / "configs" / "base.py")!r})["get_config"]()
    config.model.update(vocab_size=64, d_model=32, num_layers=2, num_heads=2, d_ff=48, max_len=32)
    return config
"""


@pytest.fixture(scope="module")
def bench():
    return load_script("experiments/benchmarks/minimal_pairs_throughput.py")


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer(sorted(set("".join(SENTENCES))), byte_fallback=True)


def inputs_of(family: str, tokenizer) -> list[list[int]]:
    return [family_spec(family).framing.scoring_input(tokenizer.encode(t)) for t in SENTENCES]


@pytest.mark.parametrize("family,variant", [("causal", Scoring.CAUSAL), ("mlm", Scoring.PLL)])
def test_the_useful_flops_count_the_units_the_kernel_runs(bench, tokenizer, family, variant):
    inputs = inputs_of(family, tokenizer)
    units = bench.scored_units(inputs, family_spec(family).scoring)
    if variant is Scoring.CAUSAL:  # each sentence once
        assert units == [len(x) for x in inputs]
    else:  # one masked copy of the sentence per token between the two specials
        assert len(units) == sum(len(x) - 2 for x in inputs)


@pytest.mark.parametrize("family,variant", [("causal", Scoring.CAUSAL), ("mlm", Scoring.PLL)])
def test_the_kernel_and_the_official_scorer_agree(bench, tokenizer, tmp_path, family, variant):
    pytest.importorskip("torch", reason='the official scorer runs in PyTorch: the export extra')
    pytest.importorskip("transformers")
    config = tmp_path / "tiny.py"
    config.write_text(TINY)
    model, params = bench.random_model(str(config), family, tokenizer.vocab_size)
    scorer = scoring.SentenceScorer(model, params, family_spec(family).scoring, tokenizer.mask_id, 4, 32)
    assert scorer.variant is variant
    hf_model = bench.export_for_torch(model, params, tokenizer, str(tmp_path / "export"))
    official, kernel, _, _ = bench.official_comparison(scorer, hf_model, inputs_of(family, tokenizer), tokenizer)
    assert official.shape == kernel.shape == (len(SENTENCES),)
    np.testing.assert_allclose(kernel, official, rtol=1e-4, atol=1e-3)
