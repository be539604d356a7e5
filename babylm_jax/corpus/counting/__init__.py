"""Prepare step 1: the corpus read, normalised and counted in jieba words against the budget; cache keys, checksums."""
