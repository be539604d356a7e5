"""metrics.jsonl: one JSON record per logged step (process 0), trimmed to the last checkpoint at a resume."""
from __future__ import annotations

import json
import os
from typing import Any

from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write_text


class MetricsWriter:
    """Appends one JSON object per line to `<workdir>/metrics.jsonl` (process 0 only)."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.path = os.path.join(workdir, rundir.METRICS)
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def trim_metrics(workdir: str, last_step: int) -> None:
    """Makes `<workdir>/metrics.jsonl` fit a run resumed at `last_step`.

    Drops a partial last line (a run killed mid-write) and the records of steps after
    `last_step` (they will be trained and logged again), so each step is logged once.
    """
    path = os.path.join(workdir, rundir.METRICS)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    kept = []
    for line in text.split("\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the partial line a killed run left (or the empty string after the last newline)
        if isinstance(record, dict) and record.get("step", 0) <= last_step:
            kept.append(line)
    trimmed = "".join(line + "\n" for line in kept)
    if trimmed != text:
        atomic_write_text(path, trimmed)
