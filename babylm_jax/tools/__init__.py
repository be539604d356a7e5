"""Generators beside the pipeline: hanzi facts, synthetic fMRI."""
