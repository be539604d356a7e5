"""Corpus reading, tokenizers, token caches and the grain input pipeline."""
