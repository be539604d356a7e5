"""experiments/prepare_scale.py: its corpus is the official parquet layout our reader reads, near the asked size."""
import numpy as np
import pyarrow.parquet as pq
import pytest
from fixtures.data import synthetic
from fixtures.scripts import load_script

from babylm_jax.config.data import DataConfig
from babylm_jax.corpus.counting import sources, words


@pytest.fixture(scope="module")
def scale():
    return load_script("experiments/prepare_scale.py")


def test_the_corpus_is_read_as_the_official_one_with_about_the_words_asked(scale, tmp_path):
    out = tmp_path / "corpus"
    written = scale.write_corpus(out, 0.02, data_dir=None, shard_million_words=0.01, sample_chars=50_000)
    files = sorted((out / "data").glob("*.parquet"))
    assert [f.name for f in files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    assert pq.read_schema(files[0]).names == ["text", "source"]
    config = synthetic.base_config().data
    config.corpus = str(out)
    data_config = DataConfig.from_config(config)
    texts = [text for _, text in sources.iter_raw_documents(sources.list_sources(data_config), data_config)]
    assert len(texts) == written["documents"] and sum(map(len, texts)) == written["characters"]
    assert sum(len(words.jieba_words(t)) for t in texts) == pytest.approx(20_000, rel=0.1)


def test_a_varied_document_keeps_its_characters(scale):
    text = "第一句。第二句！第三句？第四句"
    for seed in range(8):
        pieces = scale.vary(text, np.random.default_rng(seed))
        assert 1 <= len(pieces) <= 2 and sorted("".join(pieces)) == sorted(text)
