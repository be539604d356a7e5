"""Exported models in PyTorch match the JAX model: logits, hidden states, and minimal-pair sentence scores."""
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason='loading the exported model needs PyTorch: the export extra (README "Export to Hugging Face")')
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from babylm_jax.core.families import family_spec  # noqa: E402
from babylm_jax.corpus import tokenizer_training  # noqa: E402
from babylm_jax.eval.zero_shot import minimal_pairs, scoring  # noqa: E402
from babylm_jax.hf import writer  # noqa: E402
from babylm_jax.config.model import ModelConfig  # noqa: E402
from babylm_jax.model.transformer import Transformer  # noqa: E402

TEXT = "今天天气很好我们去公园散步吧他把杯子打碎了书被她放在桌子上小猫在睡觉老师说的话很有道理。，！？"
PAIRS = [  # (good, bad), written for this test
    ("他把杯子打碎了。", "杯子把他打碎了。"),
    ("我们去公园散步吧。", "我们去公园吧散步。"),
    ("书被她放在桌子上。", "书被她放桌子在上。"),
    ("小猫在睡觉。", "在小猫睡觉。"),
    ("老师说的话很有道理！", "老师的说话很道理有！"),
    ("今天天气很好，龘。", "天气今天很好，龘。"),  # 龘 is outside the vocabulary: byte fallback
]
CASES = {  # name: (family, mlp, norm, output layer, scan_layers)
    "causal_llama": ("causal", "swiglu", "rmsnorm", None, False),
    "causal_gelu_layernorm": ("causal", "gelu", "layernorm", 1, False),
    "mlm": ("mlm", "gelu", "layernorm", None, True),
    "hybrid": ("hybrid", "swiglu", "rmsnorm", -2, False),
}


@pytest.fixture(scope="module")
def tokenizer():
    counts = {c: 2 for c in TEXT}
    return tokenizer_training.char_tokenizer_from_counts(counts, vocab_size=400, min_count=1, byte_fallback=True)


def _export(tmp_path_factory, tokenizer, name):
    family, mlp, norm, layer, scan = CASES[name]
    config = ModelConfig(family=family, vocab_size=tokenizer.vocab_size, d_model=32, num_layers=2, num_heads=2,
                         d_ff=48, max_len=64, mlp=mlp, norm=norm, scan_layers=scan)
    model = Transformer(config)
    shapes = nn.meta.unbox(jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
    rng = np.random.default_rng(0)

    def draw(path, shape):  # non-trivial norm scales and biases, sharper logits than the init
        center = 1.0 if jax.tree_util.keystr(path).endswith("['scale']") else 0.0
        return (center + 0.2 * rng.standard_normal(shape.shape)).astype(np.float32)

    params = jax.tree_util.tree_map_with_path(draw, shapes)
    out = tmp_path_factory.mktemp(name) / "hf"
    writer.write_export(out, config, params, tokenizer, provenance={"step": 7, "words_seen": 123.0}, layer=layer)
    return model, params, out


@pytest.fixture(scope="module")
def export_case(tmp_path_factory, tokenizer):
    """name -> (model, params, export dir), each case exported once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _export(tmp_path_factory, tokenizer, name)
        return cache[name]

    return get


def _batch(tokenizer):
    rows = [tokenizer.encode(t) for t in ("今天天气很好，龘。", "他把杯子打碎了", "小猫")]
    length = max(map(len, rows))
    tokens = np.zeros((len(rows), length), np.int64)
    mask = np.zeros((len(rows), length), np.int64)
    for i, r in enumerate(rows):
        tokens[i, : len(r)], mask[i, : len(r)] = r, 1
    return tokens, mask


@pytest.mark.parametrize("name", list(CASES))
def test_config_and_files(name, export_case):
    model, _, out = export_case(name)
    config = json.loads((out / "config.json").read_text())
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "README.md"} <= files
    assert config["babylm_jax"]["step"] == 7 and config["torch_dtype"] == "float32"
    if name == "causal_llama":
        assert config["model_type"] == "llama" and "auto_map" not in config
        assert "modeling_babylm.py" not in files
    else:
        assert config["model_type"] == "babylm" and "modeling_babylm.py" in files
        auto = set(config["auto_map"])
        assert ("AutoModelForMaskedLM" in auto) == (model.config.family != "causal")
        assert ("AutoModelForCausalLM" in auto) == (model.config.family != "mlm")
    from safetensors.numpy import load_file

    tensors = load_file(out / "model.safetensors")
    assert all(t.dtype == np.float32 for t in tensors.values())
    assert not any("rotary" in k or "inv_freq" in k for k in tensors)


@pytest.mark.parametrize("name", list(CASES))
def test_logits_and_hidden_states_match_jax(name, export_case, tokenizer):
    model, params, out = export_case(name)
    family = model.config.family
    tokens, mask = _batch(tokenizer)
    valid = mask.astype(bool)

    @jax.jit
    def forward(tokens_BxL, segment_ids_BxL):
        _, all_hidden = model.apply(params, tokens_BxL, segment_ids_BxL, return_hidden_states=True,
                                    method=Transformer.encode)
        causal_logits = model.apply(params, tokens_BxL, segment_ids_BxL, None, True)
        return model.apply(params, tokens_BxL, segment_ids_BxL), all_hidden, causal_logits

    logits, all_hidden, ours_causal = map(np.asarray, forward(tokens.astype(np.int32), mask.astype(np.int32)))
    lm_class = transformers.AutoModelForCausalLM if family == "causal" else transformers.AutoModelForMaskedLM
    hf = lm_class.from_pretrained(out, trust_remote_code=True).eval()
    with torch.no_grad():
        result = hf(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask), output_hidden_states=True)
    assert result.logits.dtype == torch.float32
    assert np.abs(result.logits.numpy() - logits)[valid].max() < 1e-4
    assert len(result.hidden_states) == model.config.num_layers + 1
    for ours, theirs in zip(all_hidden, result.hidden_states):
        assert np.abs(theirs.numpy() - np.asarray(ours))[valid].max() < 1e-4

    base = transformers.AutoModel.from_pretrained(out, trust_remote_code=True).eval()
    layer = json.loads((out / "config.json").read_text())["babylm_jax"]["output_layer"]
    assert layer == {"causal_llama": 2, "causal_gelu_layernorm": 1, "mlm": 2, "hybrid": 1}[name]
    with torch.no_grad():
        last = base(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)).last_hidden_state
    assert np.abs(last.numpy() - np.asarray(all_hidden[layer]))[valid].max() < 1e-4

    if family == "hybrid":  # also a causal LM: causal attention, next-token logits
        causal_hf = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
        with torch.no_grad():
            causal_logits = causal_hf(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits
        assert np.abs(causal_logits.numpy() - ours_causal)[valid].max() < 1e-4


def _pipeline_scores(hf_model, hf_tokenizer, sentences, backend):
    """Sentence scores the way the official zero-shot pipeline computes them (whole sentence scored)."""
    scores = []
    for sentence in sentences:
        encoded = hf_tokenizer(sentence, return_offsets_mapping=True)
        ids = encoded["input_ids"]
        scored = [i for i, (_, end) in enumerate(encoded["offset_mapping"]) if end > 0]
        with torch.no_grad():
            if backend == "causal":
                logp = torch.log_softmax(hf_model(input_ids=torch.tensor([ids[:-1]])).logits[0], -1)
                scores.append(sum(float(logp[i - 1, ids[i]]) for i in scored))
                continue
            copies = torch.tensor([ids] * len(scored))
            copies[torch.arange(len(scored)), torch.tensor(scored)] = hf_tokenizer.mask_token_id
            logp = torch.log_softmax(hf_model(input_ids=copies).logits, -1)
            read = [i - 1 if backend == "mntp" else i for i in scored]
            scores.append(sum(float(logp[k, r, ids[i]]) for k, (r, i) in enumerate(zip(read, scored))))
    return np.asarray(scores)


@pytest.mark.parametrize("name", ["causal_llama", "mlm", "hybrid"])
def test_minimal_pair_scores_match_our_scoring(name, export_case, tokenizer):
    model, params, out = export_case(name)
    family = model.config.family
    scorer = scoring.SentenceScorer(model, params, family_spec(family).scoring, tokenizer.mask_id,
                                    batch_size=8, row_len=32, devices=jax.local_devices()[:1])
    pairs = [minimal_pairs.Pair(good, bad, "uid", "phenomenon") for good, bad in PAIRS]
    good, bad, _ = minimal_pairs.score_pairs(scorer, tokenizer, pairs)
    lm_class = transformers.AutoModelForCausalLM if family == "causal" else transformers.AutoModelForMaskedLM
    hf_model = lm_class.from_pretrained(out, trust_remote_code=True).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    backend = {"causal": "causal", "mlm": "mlm", "hybrid": "mntp"}[family]
    theirs = _pipeline_scores(hf_model, hf_tokenizer, [g for g, _ in PAIRS] + [b for _, b in PAIRS], backend)
    np.testing.assert_allclose(theirs, np.concatenate([good, bad]), atol=1e-3, rtol=0)
    assert np.ptp(theirs) > 1.0  # scores really differ between sentences


GENERATE_PROMPTS = ("今天天气", "他把杯子", "小")


@pytest.mark.parametrize("name", ["causal_llama", "causal_gelu_layernorm", "hybrid"])
def test_greedy_generate_with_the_cache_equals_sample(name, export_case, tokenizer):
    from babylm_jax.model import decode

    model, params, out = export_case(name)
    stop_id = family_spec(model.config.family).framing.closer_id
    batch = decode.encode_prompts(tokenizer, GENERATE_PROMPTS, model.config.family, room=32)
    sampling = decode.Sampling(max_new_tokens=10, temperature=0.0)
    generate = decode.make_generate(model, sampling, stop_id, tokenizer.vocab_size)
    ours = np.asarray(generate(params, batch.tokens_BxP, batch.pads_B, jax.random.key(0)))
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    assert hf.generation_config.eos_token_id == stop_id
    padded = torch.tensor(batch.tokens_BxP, dtype=torch.long)
    mask = torch.tensor(np.arange(batch.tokens_BxP.shape[1])[None] >= batch.pads_B[:, None], dtype=torch.long)
    with torch.no_grad():
        alone = [hf.generate(padded[b:b + 1, int(batch.pads_B[b]):], max_new_tokens=10, do_sample=False)
                 for b in range(len(GENERATE_PROMPTS))]
        together = hf.generate(padded, attention_mask=mask, max_new_tokens=10, do_sample=False, use_cache=True)
    width = padded.shape[1]
    for b, row in enumerate(ours.tolist()):
        new = alone[b][0, width - int(batch.pads_B[b]):].tolist()
        assert row == new + [0] * (10 - len(new))
        if name != "causal_llama":  # a Llama numbers a left-padded row's positions from its first slot
            assert together[b, width:].tolist() == row[: together.shape[1] - width]


def test_fill_mask_pipeline_runs_on_an_mlm_export(export_case):
    _, _, out = export_case("mlm")
    fill = transformers.pipeline("fill-mask", model=str(out), trust_remote_code=True, top_k=3)
    fills = fill("今天天气很[MASK]。")
    assert len(fills) == 3 and all(f["token"] >= 0 and 0 <= f["score"] <= 1 for f in fills)
    assert fills[0]["score"] >= fills[1]["score"] >= fills[2]["score"]
