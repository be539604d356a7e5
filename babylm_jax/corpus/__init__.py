"""Pretraining data: counting/ (sources, jieba words, budget), hanzi/, tokens/ (tokenizer, token cache), batches/."""
