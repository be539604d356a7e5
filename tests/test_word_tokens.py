"""The words tokenizer kind (`data.tokenizer.kind="words"`) wherever a tokenizer is used: prepare and the
token cache with whole-word starts, training of every family, minimal pairs, fine-tuning, fMRI features and
the Hugging Face export read back by transformers."""
import dataclasses
import json
import math
import pathlib

import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.evaluation import DEFAULT_CONFIG, EvalSettings, ScoringSettings, default_settings
from babylm_jax.config.files import load_config_file
from babylm_jax.config.schema import RunConfig
from babylm_jax.core.families import family_spec
from babylm_jax.corpus import words
from babylm_jax.corpus import preparation
from babylm_jax.eval import runner
from babylm_jax.eval.fmri import features
from babylm_jax.tasks import registry as tasks
from babylm_jax.training import checkpoints, loop

TESTS = pathlib.Path(__file__).parent
PAIRS = TESTS / "fixtures" / "minimal_pairs"
CLUE = TESTS / "fixtures" / "clue"
HF_WORDS_FILE = TESTS.parent / "babylm_jax" / "hf" / "tokenization_babylm_words.py"


def _words_config(corpus_dir, family="causal"):
    config = tiny_config(corpus_dir, family=family, tokenizer="words", whole_word_masking=True)
    config.train.update(num_steps=4, eval_every_steps=4)
    config.checkpoint.every_steps = 4
    return config


def test_prepare_caches_word_pieces_with_jieba_word_starts(tiny_corpus_dir, tmp_path):
    run = RunConfig.from_config(_words_config(tiny_corpus_dir))
    prepared = preparation.prepare_corpus(run, tmp_path)
    tokenizer, cache = prepared.tokenizer, prepared.tokens
    assert tokenizer.kind == "words" and any(len(tokenizer.id_to_piece(i)) > 1 for i in tokenizer.encode("我们喜欢"))
    framing = family_spec("causal").framing
    texts = list(prepared.corpus.iter_texts())
    assert len(texts) == cache.num_documents
    for d, text in enumerate(texts[:50]):
        row = slice(cache.doc_offsets[d], cache.doc_offsets[d + 1])
        assert cache.tokens[row].tolist() == framing.frame(tokenizer.encode(text))
        # whole-word masking draws at word starts: here each jieba word begins exactly one token
        assert int(cache.word_starts[row].sum()) - 2 == len(words.jieba_words(text)) == cache.doc_words[d]
    assert (tmp_path / "tokenizer" / "pieces.json").is_file()


@pytest.fixture(scope="module", params=["causal", "mlm", "hybrid"])
def trained(request, tiny_corpus_dir, tmp_path_factory):
    """A 4-step run of each family on the words kind, with whole-word masking."""
    workdir = tmp_path_factory.mktemp(request.param) / "run"
    summary = loop.train_and_evaluate(RunConfig.from_config(_words_config(tiny_corpus_dir, request.param)),
                                         str(workdir))
    return request.param, workdir, summary


def _scoring_settings() -> EvalSettings:
    return dataclasses.replace(default_settings(), scoring=ScoringSettings(batch_size=8, row_len=32,
                                                                           within_word_l2r=False))


@pytest.mark.slow
def test_each_family_trains_and_scores_minimal_pairs(trained):
    family, workdir, _ = trained
    logged = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in logged if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    loaded = checkpoints.load_for_eval(str(workdir))
    assert loaded.tokenizer.kind == "words" and loaded.step == 4
    result = runner.run_registry_task(tasks.get_task("zhoblimp"), loaded, PAIRS, _scoring_settings())
    assert 0 <= result.values["accuracy"] <= 1 and result.details["num_uids"] > 0
    if family != "causal":  # PLL masking later pieces of the same jieba word
        within = dataclasses.replace(_scoring_settings(), scoring=ScoringSettings(8, 32, within_word_l2r=True))
        assert runner.run_registry_task(tasks.get_task("zhoblimp"), loaded, PAIRS, within).values["accuracy"] >= 0


@pytest.mark.slow
def test_fine_tuning_and_fmri_features_on_words(trained):
    family, workdir, _ = trained
    if family != "causal":
        pytest.skip("one family is enough: the paths read the tokenizer alone")
    loaded = checkpoints.load_for_eval(str(workdir))
    config = load_config_file(DEFAULT_CONFIG)
    config.finetune.update(progress=False, max_len=24, batch_size=16, epochs=1)
    result = runner.run_registry_task(tasks.get_task("diagnostic_nli"), loaded, CLUE, EvalSettings.from_config(config))
    assert 0 <= result.values["accuracy"] <= 1
    tokenizer, story = loaded.tokenizer, ["我们", "喜欢", "看书", "龘"]  # each word tokenized on its own
    (ids, members), = features.context_rows(tokenizer, story, room=30)
    assert ids == [i for w in story for i in tokenizer.encode(w)] and len(members) == len(story)
    per_word = features.word_features(loaded.model, loaded.params, tokenizer, family, story)
    in_story = features.story_word_features(loaded.model, loaded.params, tokenizer, family, [story])
    assert per_word.shape == in_story.shape == (loaded.model.config.num_layers + 1, len(story), loaded.model.config.d_model)
    assert np.isfinite(per_word).all() and np.isfinite(in_story).all()


@pytest.mark.slow
def test_the_export_reloads_in_transformers_with_our_ids(trained, tmp_path):
    pytest.importorskip("safetensors", reason='writing an export needs the export extra (README "Export")')
    transformers = pytest.importorskip("transformers")
    from babylm_jax import export

    family, workdir, _ = trained
    out = export.export(workdir, tmp_path / "hf")
    assert (out / "tokenization_babylm_words.py").is_file() and (out / "vocab.json").is_file()
    hf = transformers.AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    ours = checkpoints.load_for_eval(str(workdir)).tokenizer
    framing = family_spec(family).framing
    sentences = [json.loads(line)[k] for path in sorted(PAIRS.rglob("*.jsonl"))
                 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
                 for k in ("sentence_good", "sentence_bad") if k in json.loads(line)]
    assert sentences and all(hf(s)["input_ids"] == framing.frame(ours.encode(s)) for s in sentences)
    for sentence in sentences:  # the official causal scorer asks for offsets
        _assert_spans_rebuild(hf, sentence, hf(text=sentence, return_offsets_mapping=True)["offset_mapping"])


def _assert_spans_rebuild(hf, text, offsets):
    """Framing (0, 0) at both ends; each word piece spans its own text, each character's byte pieces that
    character; the spans, in order, are the text."""
    tokens = hf.convert_ids_to_tokens(hf(text)["input_ids"])
    assert len(offsets) == len(tokens) and offsets[0] == offsets[-1] == (0, 0)
    for token, (start, end) in zip(tokens[1:-1], offsets[1:-1]):
        assert end - start == 1 if token.startswith("<0x") else text[start:end] == token, (token, start, end)
    distinct = [span for i, span in enumerate(offsets[1:-1]) if i == 0 or span != offsets[i]]
    assert "".join(text[start:end] for start, end in distinct) == text


def test_the_exported_tokenizer_gives_offsets_as_a_fast_tokenizer_does(tmp_path):
    """The official pipeline's causal minimal-pair scorer calls the tokenizer with return_offsets_mapping=True
    (a slow tokenizer of transformers has none): spans of word pieces, byte pieces, special pieces written in
    the text, a padded batch and a pair."""
    pytest.importorskip("transformers")
    import importlib.util

    spec = importlib.util.spec_from_file_location("tokenization_babylm_words", HF_WORDS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    special = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]", "[CLS]", "[SEP]"]
    pieces = special + [f"<0x{b:02X}>" for b in range(256)] + ["我们", "去", "公园", "公", "园", "散步", "吧", " "]
    (tmp_path / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False), encoding="utf-8")
    hf = module.BabyLMWordTokenizer(str(tmp_path / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                                    bos_token="<s>", eos_token="</s>", mask_token="[MASK]")
    for text in ("我们去公园散步吧", "他说：我们去 公园吧！", "<s>我们[MASK]公园"):
        _assert_spans_rebuild(hf, text, hf(text=text, return_offsets_mapping=True)["offset_mapping"])
    assert hf("他去", return_offsets_mapping=True)["offset_mapping"] == [(0, 0), (0, 1), (0, 1), (0, 1), (1, 2), (0, 0)]
    batch = hf(["我们去公园", "去"], return_offsets_mapping=True, padding=True)
    assert batch["offset_mapping"] == [[(0, 0), (0, 2), (2, 3), (3, 5), (0, 0)], [(0, 0), (0, 1), (0, 0), (0, 0), (0, 0)]]
    assert hf("我们", "去公园", return_offsets_mapping=True)["offset_mapping"] == [(0, 0), (0, 2), (0, 0), (0, 1),
                                                                                    (1, 3), (0, 0)]


def _call_forms():
    """(texts, options) of every call a scorer makes: single, batch, padded (both sides), pair; framed or not."""
    single, batch = "我们今天去北京。", ["我们今天去北京。", "去公园", "我们"]
    for framed in (True, False):
        yield single, {"add_special_tokens": framed}
        yield batch, {"add_special_tokens": framed, "padding": True}
        yield batch, {"add_special_tokens": framed, "padding": True, "padding_side": "left"}
        yield [single], {"add_special_tokens": framed}
    yield ("我们", "去公园"), {}


@pytest.mark.parametrize("return_tensors", [None, "np", "pt"])
def test_the_exported_words_tokenizer_keeps_a_fast_tokenizers_contract_in_every_call_form(return_tensors, tmp_path):
    """Offsets with the framing slots even without add_special_tokens (8 for 6 ids), and a single text's
    return_tensors="pt" input_ids of shape [7], not [1, 7] (the exported model then failed in its rotary
    embedding). On a vocabulary of characters the words tokenizer gives the ids of our char tokenizer's fast
    export: every call form must give what that fast tokenizer gives, key by key, shape by shape."""
    transformers = pytest.importorskip("transformers")
    if return_tensors == "pt":
        pytest.importorskip("torch", reason='return_tensors="pt" needs PyTorch, in the export extra (README "Export")')
    import importlib.util

    from babylm_jax.corpus.tokenizer import CharTokenizer
    from babylm_jax.hf import fast_tokenizer

    spec = importlib.util.spec_from_file_location("tokenization_babylm_words", HF_WORDS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chars = CharTokenizer(list("我们今天去北京。公园"), byte_fallback=False)
    pieces = [chars.id_to_piece(i) for i in range(chars.vocab_size)]
    (tmp_path / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False), encoding="utf-8")
    specials = dict(unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>", mask_token="[MASK]")
    ours = module.BabyLMWordTokenizer(str(tmp_path / "vocab.json"), byte_fallback=False, **specials)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=fast_tokenizer.build_fast_tokenizer(chars, "causal"), **specials)
    for texts, options in _call_forms():
        text, pair = texts if isinstance(texts, tuple) else (texts, None)
        got, want = (tokenizer(text, pair, return_offsets_mapping=True, return_tensors=return_tensors, **options)
                     for tokenizer in (ours, fast))
        for key in ("input_ids", "attention_mask", "offset_mapping"):
            assert type(got[key]) is type(want[key]), (texts, options, key)
            assert np.shape(got[key]) == np.shape(want[key]), (texts, options, key)
            assert np.asarray(got[key]).tolist() == np.asarray(want[key]).tolist(), (texts, options, key)
    plain = ours("我们今天去北京。", add_special_tokens=False, return_offsets_mapping=True)
    assert len(plain["offset_mapping"]) == len(plain["input_ids"]) == 8
