"""What a run measures: FLOPs and MFU against peak FLOP/s, tokens/s, step logging, metrics.jsonl, learning curves."""
