"""JSON, JSON Lines and text reading shared by every reader of user files, with errors naming file and line.

A byte-order mark that starts a file (a Windows editor's) is the encoding's, not text: it is read without it."""
from __future__ import annotations

import json
import pathlib
from typing import Any, Iterator


NOT_UTF8 = "not UTF-8 text ({reason}); save it as UTF-8 (from UTF-16 or GBK: iconv -f UTF-16 -t UTF-8 FILE)"


def read_jsonl(path: str | pathlib.Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; names file and line on bad JSON or bytes that are not
    UTF-8. A byte-order mark that starts the file (a Windows editor's) is the encoding's, not JSON."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: " + NOT_UTF8.format(reason=f"byte {e.start}: {e.reason}")) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def read_text(path: str | pathlib.Path) -> str:
    """The text of a user's UTF-8 file; bytes that are not UTF-8 are an error naming the file."""
    try:
        return pathlib.Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: " + NOT_UTF8.format(reason=f"byte {e.start}: {e.reason}")) from None


def read_json(path: str | pathlib.Path, fix: str) -> Any:
    """The JSON value of file `path`; a missing or damaged file is an error naming it, its line and `fix`."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found; {fix}")
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is the encoding's, not JSON
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}; damaged?); {fix}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); {fix}") from None


def json_kind(value: Any) -> str:
    """What a JSON value that is not a string is, as a user reads it: "a number (3)", "null", "a list"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    return "a list" if isinstance(value, list) else "an object"


def text_field(row: dict, key: str, where: str) -> str:
    """`row[key]`, which must be a string; ValueError names `where`, the field and what it holds instead."""
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r} (fields: {sorted(row)})")
    if not isinstance(row[key], str):
        raise ValueError(f"{where}: field {key!r} holds {json_kind(row[key])}, not a string")
    return row[key]
