"""Evaluation tasks: minimal pairs, fine-tuning, fMRI encoding, results."""
