"""Pretraining data: sources, jieba budget, tokenizers, token cache, packing, pipeline."""
