"""Checkpoints: orbax saves and restores, disk space, the run's saved config, word milestones, loading a trained model."""
