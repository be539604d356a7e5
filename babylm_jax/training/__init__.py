"""The pretraining loop: optimisers, sharding, checkpoints and metrics."""
