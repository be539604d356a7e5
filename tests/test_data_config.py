"""DataConfig: every data key typed and checked before any file is read; cache keys kept."""
import pathlib

import pytest

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.files import load_config_file
from babylm_jax.corpus import cache_keys
from babylm_jax.corpus import preparation
from babylm_jax.config.data import TOKENIZER_KINDS, DataConfig
from babylm_jax.core.families import family_spec
from fixtures.data import synthetic

CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[1] / "configs").glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_file_builds(path):
    config = load_config_file(path)
    if "data" not in config:
        pytest.skip("not a training config")
    data = DataConfig.from_config(config.data)
    assert data.reader_threads >= 0 and data.tokenizer.kind in TOKENIZER_KINDS


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("tokenizer.kind", "bep", r"data.tokenizer.kind: 'bep' is not one of"),
        ("tokenizer.required_characters", "all", r"data.tokenizer.required_characters: 'all'"),
        ("packing", "fist_fit", r"data.packing: 'fist_fit'"),
        ("txt_documents", "para", r"data.txt_documents: 'para'"),
        ("on_bad_line", "ignore", r"data.on_bad_line: 'ignore'"),
        ("eval_share", 1.0, r"data.eval_share: 1.0 is not in \[0, 1\)"),
        ("tokenizer.character_coverage", 0.0, r"data.tokenizer.character_coverage: 0.0"),
        ("shard_chars", 0, r"data.shard_chars: 0 is below 1"),
        ("leakage.ngram", 0, r"data.leakage.ngram: 0 is below 1"),
        ("leakage.drop", True, r"data.leakage.drop=True needs data.leakage.data_dir"),
        ("num_workers", 1.5, r"data.num_workers: 1.5 is not of type int"),
        ("tokenizer.byte_fallback", "yes", r"data.tokenizer.byte_fallback: 'yes' is not of type bool"),
        ("paths", "a.txt", r"data.paths: 'a.txt' is not of type"),
    ],
)
def test_bad_values_are_named_by_key(key, value, message):
    config = synthetic.base_config()
    *groups, name = key.split(".")
    group = config.data
    for g in groups:
        group = group[g]
    with group.ignore_type():
        group[name] = value
    with pytest.raises(ValueError, match=message):
        DataConfig.from_config(config.data)


def test_unknown_and_missing_keys_are_named():
    config = synthetic.base_config()
    config.data.unlock()
    config.data.tokenizer.unlock()
    config.data.tokenizer.kindd = "bpe"
    with pytest.raises(ValueError, match=r"unknown config key\(s\) data.tokenizer.kindd"):
        DataConfig.from_config(config.data)
    del config.data.tokenizer["kindd"]
    del config.data["reader_threads"]
    with pytest.raises(ValueError, match=r"missing config key\(s\) data.reader_threads"):
        DataConfig.from_config(config.data)


@pytest.mark.parametrize("key, value, message", [
    ("kind", "bep", "data.tokenizer.kind"),
    ("required_characters", "cjk_basic", r"required_characters needs 21,010 character ids .*model.vocab_size=64"),
])
def test_prepare_refuses_before_counting(tmp_path, monkeypatch, key, value, message):
    config = synthetic.tiny_config(synthetic.write_txt_corpus(tmp_path / "corpus", 20))
    config.data.tokenizer[key] = value

    def count_corpus(*args, **kwargs):
        raise AssertionError("the corpus was counted before the config was checked")

    monkeypatch.setattr(preparation, "count_corpus", count_corpus)
    with pytest.raises(ValueError, match=message):
        preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_cache_keys_unchanged_for_the_same_settings():
    """Keys computed by the ConfigDict code before DataConfig: users' caches stay valid. The counted corpus's key
    changes with the readers' rules (sources.READING_RULES): lone \r line ends were read as part of a line."""
    config = synthetic.base_config()
    config.data.tokenizer.kind = "char"
    config.model.vocab_size = 6000
    data = DataConfig.from_config(config.data)
    key = cache_keys.tokenizer_key("corpus-0123456789abcdef", data.tokenizer, config.model.vocab_size)
    assert key == "e1e653401dd09366"
    assert cache_keys.token_cache_key(key, family_spec("mlm").framing) == "773ebbbda1dad66b"

    class Filter:
        fingerprint = {"ngram": 13}

    assert cache_keys.corpus_key(data, {}, None) == "ed7823907e437620"
    assert cache_keys.corpus_key(data, {}, Filter()) == "bcccc5a1725f7a7b"


def test_train_refuses_a_typo_before_writing_to_the_workdir(tmp_path):
    from babylm_jax.training import loop

    config = synthetic.tiny_config(tmp_path / "no_corpus_needed")
    config.data.packing = "fist_fit"
    with pytest.raises(ValueError, match="data.packing"):
        loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()  # no config.json, no lock, no data
