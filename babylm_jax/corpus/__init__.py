"""Pretraining data: its sources and their jieba word count against the budget, the corpus cache, the
tokenizers and the token cache, the hanzi labels, and batches packed from the tokens."""
