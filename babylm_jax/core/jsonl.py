"""JSON and JSON Lines reading shared by every reader of user files, with errors naming file and line."""
from __future__ import annotations

import json
import pathlib
from typing import Any, Iterator


def read_jsonl(path: str | pathlib.Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; names file and line on bad JSON."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def read_json(path: str | pathlib.Path, fix: str) -> Any:
    """The JSON value of file `path`; a missing or damaged file is an error naming it, its line and `fix`."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found; {fix}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text (damaged?); {fix}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); {fix}") from None
