"""Checkpoints: orbax saves and restores, disk space, the saved run config, word milestones, loading a trained model."""
