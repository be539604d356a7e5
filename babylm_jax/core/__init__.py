"""Atomic writes, JSON, worker pools, progress, the run directory, vocabulary and framing."""
