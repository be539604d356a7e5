"""Model families are one registry (`core.families`): the built-in entries hold the facts the
package used to spread over seven tables, and a fixture family added by one entry and its
objective trains, scores minimal pairs and exports."""
import dataclasses
import json
import math
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.core import families
from babylm_jax.core.families import ENCODER, MASKED_LM, FamilySpec, Scoring, family_spec
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, SEP_ID
from babylm_jax.eval import runner
from babylm_jax.config.evaluation import ScoringSettings, default_settings
from babylm_jax.hf import hf_config, model_card
from babylm_jax.model import aux_heads, objectives
from babylm_jax.tasks import registry as tasks
from babylm_jax.training import checkpoints, loop, metrics

HF_DIR = pathlib.Path(hf_config.__file__).parent
PAIRS = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


def test_each_entry_has_its_objective_function_a_scoring_and_shipped_classes():
    assert list(objectives.OBJECTIVES) == list(families.FAMILY_SPECS)
    for name, spec in families.FAMILY_SPECS.items():
        assert spec.name == name
        assert callable(objectives.OBJECTIVES[name]) and isinstance(spec.scoring, Scoring)
        assert spec.aux_position in ("input", "target")
        modeling = (HF_DIR / spec.hf_modeling_file).read_text()
        assert all(f"class {cls}(" in modeling for _, cls in spec.hf_models)


def test_the_built_in_entries_keep_each_familys_facts():
    framing = {f: (s.framing.opener_id, s.framing.closer_id) for f, s in families.FAMILY_SPECS.items()}
    assert framing == {"causal": (BOS_ID, EOS_ID), "mlm": (CLS_ID, SEP_ID), "hybrid": (CLS_ID, SEP_ID)}
    facts = {f: (s.scoring, s.official_backend, s.aux_position) for f, s in families.FAMILY_SPECS.items()}
    assert facts == {"causal": (Scoring.CAUSAL, "causal", "input"), "mlm": (Scoring.PLL, "mlm", "target"),
                     "hybrid": (Scoring.MNTP, "mntp", "target")}
    shares = {f: s.causal_share(0.25) for f, s in families.FAMILY_SPECS.items()}
    assert shares == {"causal": 1.0, "mlm": 0.0, "hybrid": 0.25}
    maps = {f: hf_config.hf_config(ModelConfig(family=f, mlp="gelu"), 4, {})["auto_map"] for f in ("mlm", "hybrid")}
    assert list(maps["hybrid"]) == ["AutoConfig", "AutoModel", "AutoModelForMaskedLM", "AutoModelForCausalLM"]
    assert maps["mlm"]["AutoModelForMaskedLM"] == "modeling_babylm.BabyLMForMaskedLM"
    assert hf_config.is_llama(ModelConfig(family="causal"), 4) and not hf_config.is_llama(ModelConfig(family="mlm"), 4)


def test_an_unknown_family_is_refused_by_key():
    with pytest.raises(ValueError, match="config key model.family: 'seq2seq' is not one of"):
        ModelConfig.from_config({"family": "seq2seq"})


TRACED = []  # the fixture objective's traces


def mask_only_objective(batch, rngs, mask_rate, settings):
    """The fixture family's objective: a masked LM whose every chosen token becomes [MASK]."""
    TRACED.append(batch["tokens"].shape)
    tokens = batch["tokens"]
    masked = objectives.choose_masked_positions(rngs[0], batch, mask_rate, settings.masking)
    return jnp.where(masked, settings.masking.mask_id, tokens), False, tokens, masked


MASK_ONLY = FamilySpec("mask_only", ENCODER, scoring=Scoring.PLL, official_backend="mlm",
                       aux_position="target", hf_models=(MASKED_LM,))


@pytest.fixture(scope="module")
def mask_only():
    """The fixture family, registered for this module's tests: one registry entry and its objective."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(families.FAMILY_SPECS, MASK_ONLY.name, MASK_ONLY)
        patch.setitem(objectives.OBJECTIVES, MASK_ONLY.name, mask_only_objective)
        yield MASK_ONLY


def _fixture_config(corpus_dir):
    config = tiny_config(corpus_dir, family="mask_only")
    config.train.update(num_steps=4, eval_every_steps=4)
    config.checkpoint.every_steps = 4
    config.train.aux_heads.tone = 0.1
    return config


@pytest.fixture(scope="module")
def trained(mask_only, tiny_corpus_dir, tmp_path_factory):
    """The workdir of a 4-step run of the fixture family (with a tone head)."""
    workdir = tmp_path_factory.mktemp("mask_only") / "run"
    TRACED.clear()
    loop.train_and_evaluate(RunConfig.from_config(_fixture_config(tiny_corpus_dir)), str(workdir))
    return workdir


def test_the_fixture_family_is_refused_until_registered(tiny_corpus_dir, mask_only, monkeypatch):
    config = _fixture_config(tiny_corpus_dir)
    typed = RunConfig.from_config(config)
    assert typed.model.family == "mask_only"
    assert aux_heads.AuxHeadsConfig.from_config(typed.train, "mask_only").position == "target"
    assert metrics.causal_share(typed) == 0.0 and typed.model.has_head_transform
    monkeypatch.delitem(families.FAMILY_SPECS, "mask_only")
    with pytest.raises(ValueError, match="config key model.family: 'mask_only'"):
        RunConfig.from_config(config)


@pytest.mark.slow
def test_the_fixture_family_trains_and_scores(trained):
    assert TRACED  # the family's own objective is what trained
    logged = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in logged if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    loaded = checkpoints.load_for_eval(str(trained))
    assert loaded.model.config.family == "mask_only" and loaded.step == 4
    settings = dataclasses.replace(default_settings(), scoring=ScoringSettings(batch_size=8, row_len=32,
                                                                               within_word_l2r=False))
    result = runner.run_registry_task(tasks.get_task("zhoblimp"), loaded, PAIRS, settings)
    assert result.details["scoring"] == "pll" and 0 <= result.values["accuracy"] <= 1


@pytest.mark.slow
def test_the_fixture_family_exports_as_a_masked_lm(trained):
    loaded = checkpoints.load_for_eval(str(trained))
    exported = hf_config.hf_config(loaded.model.config, loaded.model.config.num_layers, {"step": 4})
    assert exported["architectures"] == ["BabyLMForMaskedLM"] and exported["babylm_jax"]["family"] == "mask_only"
    assert set(exported["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForMaskedLM"}
    card = model_card.model_card(loaded.config.to_dict(), exported, "char tokenizer", {"step": 4}, None)
    assert "AutoModelForMaskedLM.from_pretrained" in card and "`--backend mlm`" in card
    assert hf_config.remote_code_files("mask_only") == ("configuration_babylm.py", "modeling_babylm.py")


@pytest.mark.slow
def test_the_fixture_family_writes_its_export(trained, tmp_path):
    pytest.importorskip("safetensors", reason='writing an export needs the export extra (README "Export")')
    pytest.importorskip("tokenizers")
    from babylm_jax import export

    out = export.export(trained, tmp_path / "hf")
    written = json.loads((out / "config.json").read_text())
    assert written["family"] == "mask_only" and written["architectures"] == ["BabyLMForMaskedLM"]
    assert {"modeling_babylm.py", "configuration_babylm.py", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    single = json.loads((out / "tokenizer.json").read_text())["post_processor"]["single"]
    assert [piece["SpecialToken"]["id"] for piece in single if "SpecialToken" in piece] == ["[CLS]", "[SEP]"]

    torch = pytest.importorskip("torch", reason='loading the export needs PyTorch: the export extra')
    transformers = pytest.importorskip("transformers")
    loaded = checkpoints.load_for_eval(str(trained))
    tokens = np.asarray([loaded.tokenizer.encode("我们去公园散步吧")], np.int64)
    ours = np.asarray(loaded.model.apply(loaded.params, jnp.asarray(tokens, jnp.int32)))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(tokens), attention_mask=torch.ones_like(torch.tensor(tokens))).logits
    assert np.abs(theirs.numpy() - ours).max() < 1e-4  # bidirectional, with the head transform
