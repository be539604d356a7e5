"""Corpus sources, normalisation and bad input."""
import dataclasses
import gzip
import json
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from babylm_jax.corpus import builtin
from babylm_jax.corpus import sources as corpus
from babylm_jax.config.data import DataConfig
from babylm_jax.core.text import Normalizer
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
    options = Normalizer(nfkc=True, to_simplified=True, clean_whitespace=True, drop_empty_lines=False)
    assert options(text) == "繁体 中文 测试\n\nABC,123"


@pytest.mark.parametrize(
    "name, content, field, message",
    [
        ("bad.txt", b"ok\n\xff\xfe broken\n", "text", r"bad.txt:2: undecodable bytes"),
        ("bad.jsonl", '{"text": "好"}\n{"body": "坏"}\n'.encode(), "text", r"bad.jsonl:2: no text field 'text'"),
        ("bad.jsonl", b'{"text": "ok"}\n{not json\n', "text", r"bad.jsonl:2: malformed JSON"),
        ("long.txt", ("长" * 50).encode(), "text", r"long.txt:1: document of 50 characters exceeds"),
        ("empty.txt", b"", "text", r"empty.txt:0: empty file"),
        ("fake.parquet", "不是表格".encode(), "text", r"fake.parquet:1: not a readable parquet file"),
        ("fake.arrow", b"not arrow at all", "text", r"fake.arrow:1: not an Arrow file"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, name, content, field, message):
    (tmp_path / name).write_bytes(content)
    config = _data_config(corpus=str(tmp_path / name), max_document_chars=40, txt_documents="line")
    with pytest.raises(corpus.CorpusError, match=message):
        _documents(config)
    assert len(_documents(dataclasses.replace(config, on_bad_line="skip"))) <= 1


def test_a_file_in_gbk_is_one_warning_naming_the_encoding(tmp_path, caplog):
    path = tmp_path / "gbk.txt"
    path.write_bytes("".join(f"第{i}行中文\n" for i in range(3000)).encode("gbk"))
    (tmp_path / "utf8.txt").write_text("好\n", encoding="utf-8")
    config = _data_config(corpus=str(tmp_path), txt_documents="line")
    with pytest.raises(corpus.CorpusError, match=r"gbk.txt:1: undecodable bytes .*is it GBK\? convert it with: "
                                                 r"iconv -f GBK -t UTF-8"):
        _documents(config)
    caplog.clear()
    assert _documents(dataclasses.replace(config, on_bad_line="skip")) == ["好"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: skipped 3,000 lines that are not UTF-8 (first at line 1: undecodable bytes at byte 0 (invalid start "
        "byte); is it GBK? convert it with: iconv -f GBK -t UTF-8)"]


def test_skipped_lines_and_removed_nul_characters_are_said_once_per_file(tmp_path, caplog):
    (tmp_path / "a.jsonl").write_text('{"text": "好"}\n{not json\n{"body": 1}\n[1,\n', encoding="utf-8")
    (tmp_path / "b.txt").write_text("有\x00空\x00字符\n\n二\x00\n", encoding="utf-8")
    config = _data_config(corpus=str(tmp_path), on_bad_line="skip")
    documents = _documents(config)
    assert documents == ["好", "有\x00空\x00字符", "二\x00"]  # as read: the official count counts these
    assert [config.normalize(text) for text in documents] == ["好", "有空字符", "二"]  # as trained on
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'a.jsonl'}: skipped 2 lines of malformed JSON (first at line 2: malformed JSON (Expecting "
        "property name enclosed in double quotes))",
        f"{tmp_path / 'a.jsonl'}:3: skipped: no text field 'text' (data.text_field)",
        f"{tmp_path / 'b.txt'}: removed 3 NUL characters (\\x00) from the text trained on; budget.json's words_raw "
        "counts the text as read"]


def test_missing_path_and_parquet_column(tmp_path):
    with pytest.raises(corpus.CorpusError, match="does not exist: .*nowhere"):
        corpus.list_sources(_data_config(corpus=str(tmp_path / "nowhere")))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(corpus.CorpusError, match="t.parquet: parquet file has no column 'text'"):
        _documents(_data_config(corpus=str(tmp_path / "t.parquet")))


@pytest.mark.parametrize("values, found", [([1, 2], "int64"), ([1.5, 2.0], "double"), ([["a"], ["b"]], "list<"),
                                           ([{"a": "b"}, {"a": "c"}], "struct<a: string>")])
@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_text_column_that_is_not_text_is_one_line_naming_file_column_and_type(tmp_path, kind, values, found):
    path = tmp_path / f"t.{kind}"
    table = pa.table({"text": values, "id": [1, 2]})
    pq.write_table(table, path) if kind == "parquet" else _write_arrow_stream(path, table)
    with pytest.raises(corpus.CorpusError, match=rf"t.{kind}:1: {kind} column 'text' holds {re.escape(found)}"):
        _documents(_data_config(corpus=str(path)))
    assert _documents(_data_config(corpus=str(path), on_bad_line="skip")) == []


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_text_column_of_bytes_is_read_as_utf8_and_said(tmp_path, kind, caplog):
    path = tmp_path / f"t.{kind}"
    table = pa.table({"text": ["你好".encode(), b"\xff", None]})
    pq.write_table(table, path) if kind == "parquet" else _write_arrow_stream(path, table)
    assert _documents(_data_config(corpus=str(path), on_bad_line="skip")) == ["你好"]
    assert "holds bytes (binary), read as UTF-8 text" in caplog.text
    with pytest.raises(corpus.CorpusError, match=rf"t.{kind}:2: undecodable bytes"):
        _documents(_data_config(corpus=str(path)))


@pytest.mark.parametrize("value, said", [(3, "a number (3)"), (["a"], "a list"), (None, "null"), ({"a": 1}, "an object"),
                                         (True, "a boolean (true)")])
def test_a_jsonl_text_that_is_not_a_string_is_named_by_what_it_holds(tmp_path, value, said):
    (tmp_path / "t.jsonl").write_text(json.dumps({"text": value}) + "\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=rf"t.jsonl:1: field 'text' holds {re.escape(said)}, not a string"):
        _documents(_data_config(corpus=str(tmp_path / "t.jsonl")))


def _write_arrow_stream(path, table):
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def test_the_official_corpus_as_published(tmp_path):
    """Stand-ins for chinese-babylm-org/babylm-zho-100M: the hub's parquet download and a save_to_disk folder."""
    hub = tmp_path / "babylm-zho-100M"  # huggingface-cli download ... --local-dir
    (hub / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["第一篇", "第二篇"], "source": ["a", "b"]}), hub / "data" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": ["第三篇"], "source": ["c"]}), hub / "data" / "train-00001-of-00002.parquet")
    (hub / "README.md").write_text("---\nlicense: other\n---\n", encoding="utf-8")
    (hub / ".cache" / "huggingface" / "download" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["缓存"]}), hub / ".cache" / "huggingface" / "download" / "data" / "stale.parquet")
    assert _documents(_data_config(corpus=str(hub))) == ["第一篇", "第二篇", "第三篇"]

    saved = tmp_path / "saved"  # datasets.Dataset.save_to_disk: arrow streams listed by state.json
    saved.mkdir()
    _write_arrow_stream(saved / "data-00001-of-00002.arrow", pa.table({"text": ["乙", None]}))
    _write_arrow_stream(saved / "data-00000-of-00002.arrow", pa.table({"text": ["甲"]}))
    (saved / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string", "_type": "Value"}}}))
    state = {"_data_files": [{"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}],
             "_split": "train"}
    (saved / "state.json").write_text(json.dumps(state))
    config = _data_config(corpus=str(saved), on_bad_line="skip")
    assert _documents(config) == ["甲", "乙"]  # the None row is a bad line
    with pytest.raises(corpus.CorpusError, match=r"data-00001-of-00002.arrow:2: row has no 'text' value"):
        _documents(dataclasses.replace(config, on_bad_line="stop"))

    dataset_dict = tmp_path / "dict"  # DatasetDict.save_to_disk: one such folder per split
    shutil.copytree(saved, dataset_dict / "train")
    (dataset_dict / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    assert _documents(_data_config(corpus=str(dataset_dict), on_bad_line="skip")) == ["甲", "乙"]
    assert _documents(_data_config(paths=[str(tmp_path)], on_bad_line="skip")) == [
        "第一篇", "第二篇", "第三篇", "甲", "乙", "甲", "乙"]  # save_to_disk folders found inside a tree

    (saved / "data-00000-of-00002.arrow").unlink()
    with pytest.raises(corpus.CorpusError, match=r"state.json lists \['data-00000-of-00002.arrow'\], missing"):
        corpus.list_sources(_data_config(corpus=str(saved)))
    pq.write_table(pa.table({"content": ["x"]}), hub / "data" / "train-00000-of-00002.parquet")
    with pytest.raises(corpus.CorpusError, match="parquet file has no column 'text'"):
        _documents(_data_config(corpus=str(hub)))


def test_what_a_corpus_folder_walk_leaves_out_or_follows_is_said_once(tmp_path, caplog):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / ".cache").mkdir()
    (folder / "good.txt").write_text("好\n", encoding="utf-8")
    (folder / "sub" / "in.txt").write_text("内\n", encoding="utf-8")
    (folder / ".cache" / "stale.txt").write_text("旧\n", encoding="utf-8")
    (folder / ".notes.txt").write_text("藏\n", encoding="utf-8")
    (folder / "README.md").write_text("# corpus\n", encoding="utf-8")
    (folder / "self").symlink_to(".")
    (folder / "sub_link").symlink_to("sub")
    (folder / "a").symlink_to("b")
    (folder / "b").symlink_to("a")
    (folder / "gone.txt").symlink_to("missing.txt")
    (folder / "alias.txt").symlink_to("good.txt")
    config = _data_config(corpus=str(folder))
    caplog.set_level("WARNING")
    [source] = corpus.list_sources(config)
    assert [f.relative_to(folder).as_posix() for f in source.files] == ["alias.txt", "good.txt", "sub/in.txt"]
    corpus.list_sources(config)  # listed again (prepare and the run's inputs record): nothing said twice
    assert sorted(r.getMessage() for r in caplog.records) == sorted(f"{folder}: {line}" for line in [
        "skipped 1 hidden folders; e.g. .cache",
        "skipped 1 hidden files; e.g. .notes.txt",
        "skipped 1 files of kinds the reader does not take (it reads .txt/.jsonl/.jsonl.gz/.parquet/.arrow); "
        "e.g. README.md",
        "skipped 3 links that lead nowhere (broken, or a loop); e.g. a -> b",
        "skipped 2 links to folders, not followed (name such a folder in data.paths to read it); e.g. self -> .",
        "followed 1 links to files, read as the files they point to; e.g. alias.txt -> good.txt",
    ])


def test_a_utf8_byte_order_mark_is_read_as_the_encodings_and_said(tmp_path, caplog):
    """A file saved as UTF-8 with a BOM (utf-8-sig) gave its first document an invisible U+FEFF, trained on and
    given an id of its own without a word; a .jsonl's first line was malformed JSON."""
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbf" + "好的\n".encode())
    (tmp_path / "b.jsonl").write_bytes(b"\xef\xbb\xbf" + '{"text": "有"}\n'.encode())
    caplog.set_level("WARNING")
    assert _documents(_data_config(corpus=str(tmp_path))) == ["好的", "有"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / name}: read without the UTF-8 byte-order mark it starts with (U+FEFF, not text)"
        for name in ("a.txt", "b.jsonl")]


def test_a_corpus_file_name_that_is_not_utf8_is_refused_before_any_reading(tmp_path):
    """Such a name failed only after every word was counted, as "'utf-8' codec can't encode character '\\udcff'"."""
    (tmp_path / "good.txt").write_text("好\n", encoding="utf-8")
    (tmp_path / "bad\udcffname.txt").write_text("坏\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=r"corpus file b'.*bad\\xffname.txt' \(under data.corpus / data.paths "
                                                 r".*\) has a name that is not UTF-8; rename it"):
        corpus.list_sources(_data_config(corpus=str(tmp_path)))


def test_a_corpus_file_gone_after_the_listing_is_named_with_a_way_on(tmp_path):
    """A file removed while prepare ran was "[Errno 2] No such file or directory: ..." alone."""
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("好\n", encoding="utf-8")
    config = _data_config(corpus=str(tmp_path))
    sources = corpus.list_sources(config)
    (tmp_path / "b.txt").unlink()
    with pytest.raises(corpus.CorpusError, match=rf"corpus file {tmp_path / 'b.txt'} is gone \(removed or renamed "
                                                 r"after the corpus was listed\); restore it, or run the same command"):
        list(corpus.iter_raw_documents(sources, config))


# Files from Windows (\r\n), an old Mac or a Windows tool that ends lines with a lone \r, a BOM, whitespace-only
# lines (an ideographic space too) and no line end at the end: the documents each reader makes of them.
TRICKY = b"\xef\xbb\xbf\xe7\x8c\xab\r\n\xe7\x8b\x97\r\n\r\n\xe9\xb8\x9f\r\r\xe9\xb1\xbc\r\n \xe3\x80\x80\r\n\xe9\xbe\x99"
DOCUMENTS = {"blank_line": ["猫\n狗", "鸟", "鱼", "龙"], "line": ["猫", "狗", "", "鸟", "", "鱼", " \u3000", "龙"]}


@pytest.mark.parametrize("txt_documents", list(DOCUMENTS))
def test_the_reading_rules_in_the_cache_key_are_what_the_readers_do(txt_documents, tmp_path):
    """A reader whose rule changed while the counted corpus's key stayed the same reused a cache counted under the
    old rule: other documents. The rule is part of the key (sources.READING_RULES): if this fails after a change
    to a reader, say the new rule in READING_RULES (so its caches are counted again), then update this test."""
    from babylm_jax.corpus.cache_keys import fingerprint

    (tmp_path / "windows.txt").write_bytes(TRICKY)
    (tmp_path / "windows.jsonl").write_bytes(b'{"text": "a"}\r\n\r\n{"text": "b"}\r{"text": "c"}')
    assert (_documents(_data_config(paths=[str(tmp_path / "windows.txt")], txt_documents=txt_documents))
            == DOCUMENTS[txt_documents])
    assert _documents(_data_config(paths=[str(tmp_path / "windows.jsonl")])) == ["a", "b", "c"]
    assert fingerprint(corpus.READING_RULES) == "94bc927832c6e3a6"
