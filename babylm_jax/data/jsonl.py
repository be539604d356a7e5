"""JSON Lines reading shared by every task and corpus reader, with errors naming file and line."""
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
