"""experiments/prepare_scale.py: its corpus is the official parquet layout our reader reads, near the asked size."""
import numpy as np
import pyarrow.parquet as pq
import pytest
from fixtures.data import synthetic
from fixtures.scripts import load_script

from babylm_jax.config.data import DataConfig
from babylm_jax.corpus import sources, words


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


def test_freshen_replaces_about_the_share_of_hanzi_and_nothing_else(scale):
    text = "今天天气很好，我们去公园散步。ABC 123！" * 200
    pool = scale.hanzi_pool([("s", "春夏秋冬")])
    fresh = scale.freshen(text, 0.1, pool, np.random.default_rng(0))
    assert len(fresh) == len(text)
    changed = [(a, b) for a, b in zip(text, fresh) if a != b]
    assert all("\u4e00" <= a <= "\u9fd5" and b in "春夏秋冬" for a, b in changed)
    hanzi = sum("\u4e00" <= a <= "\u9fd5" for a in text)
    assert 0.05 * hanzi < len(changed) < 0.15 * hanzi


def test_prepare_resume_reads_its_kill_points_and_compares_every_file(tmp_path):
    resume = load_script("experiments/prepare_resume.py")
    assert resume.parse_kill("count words:0.5") == ("count words", 0.5)
    with pytest.raises(Exception, match="--kill 'tokenise:2'"):
        resume.parse_kill("tokenise:2")
    for name in ("a", "b"):
        (tmp_path / name / "data" / "shards").mkdir(parents=True)
        (tmp_path / name / "budget.json").write_text("{}")
        (tmp_path / name / "data" / "shards" / "x.npy").write_bytes(b"same")
        (tmp_path / name / "data" / "prepared.json").write_text(name)  # names its own workdir: not compared
    assert resume.file_digests(tmp_path / "a") == resume.file_digests(tmp_path / "b")
    (tmp_path / "b" / "data" / "shards" / "x.npy").write_bytes(b"other")
    assert resume.file_digests(tmp_path / "a").keys() == {"budget.json", "data/shards/x.npy"}
    assert resume.file_digests(tmp_path / "a") != resume.file_digests(tmp_path / "b")
