"""Prepare steps 2 and 3 and their order: the tokenizer, the token cache, what a run was started from."""
