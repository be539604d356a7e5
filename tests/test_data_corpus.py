"""Corpus sources, normalisation and bad input."""
import dataclasses
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from babylm_jax.data import builtin, corpus
from babylm_jax.data.config import DataConfig
from fixtures.data import synthetic


def _data_config(**overrides) -> DataConfig:
    config = synthetic.base_config().data
    config.corpus = ""
    for key, value in overrides.items():
        config[key] = value
    return DataConfig.from_config(config)


def _documents(config) -> list[str]:
    return [text for _, text in corpus.iter_raw_documents(corpus.list_sources(config), config)]


def test_mixed_sources(tmp_path):
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text("第一段第一行\n第一段第二行\n\n第二段\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"content": "压缩的文档"}, ensure_ascii=False) + "\n\n")
    pq.write_table(pa.table({"content": ["表格一", "表格二"], "id": [1, 2]}), tmp_path / "c.parquet")
    config = _data_config(paths=[str(tmp_path / "txt"), str(tmp_path / "b.jsonl.gz"), str(tmp_path / "c.parquet")], text_field="content")
    assert _documents(config) == ["第一段第一行\n第一段第二行", "第二段", "压缩的文档", "表格一", "表格二"]
    config = dataclasses.replace(config, txt_documents="line", max_documents=3)
    assert _documents(config) == ["第一段第一行", "第一段第二行", ""]


def test_builtin_strips_tags():
    assert builtin.strip_pos_tags("[中央/n  电台/n]nt  讲话/v  ，/w  //w\n") == "中央电台讲话，/"
    config = _data_config(corpus="builtin", max_documents=5)
    docs = _documents(config)
    assert len(docs) == 5 and all("/" not in d for d in docs)


def test_normalisation():
    text = "  繁體  中文\t測試 \r\n\n ＡＢＣ，１２３ "
    default = _data_config().normalize
    assert default(text) == "繁體 中文 測試\nＡＢＣ，１２３"
    options = corpus.Normalizer(nfkc=True, to_simplified=True, clean_whitespace=True, drop_empty_lines=False)
    assert options(text) == "繁体 中文 测试\n\nABC,123"


@pytest.mark.parametrize(
    "name, content, field, message",
    [
        ("bad.txt", b"ok\n\xff\xfe broken\n", "text", r"bad.txt:2: undecodable bytes"),
        ("bad.jsonl", '{"text": "好"}\n{"body": "坏"}\n'.encode(), "text", r"bad.jsonl:2: no text field 'text'"),
        ("bad.jsonl", b'{"text": "ok"}\n{not json\n', "text", r"bad.jsonl:2: malformed JSON"),
        ("long.txt", ("长" * 50).encode(), "text", r"long.txt:1: document of 50 characters exceeds"),
        ("empty.txt", b"", "text", r"empty.txt:0: empty file"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, name, content, field, message):
    (tmp_path / name).write_bytes(content)
    config = _data_config(corpus=str(tmp_path / name), max_document_chars=40, txt_documents="line")
    with pytest.raises(corpus.CorpusError, match=message):
        _documents(config)
    assert len(_documents(dataclasses.replace(config, on_bad_line="skip"))) <= 1


def test_missing_path_and_parquet_column(tmp_path):
    with pytest.raises(corpus.CorpusError, match="does not exist: .*nowhere"):
        corpus.list_sources(_data_config(corpus=str(tmp_path / "nowhere")))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(corpus.CorpusError, match="t.parquet: parquet file has no column 'text'"):
        _documents(_data_config(corpus=str(tmp_path / "t.parquet")))
