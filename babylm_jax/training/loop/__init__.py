"""The pretraining loop: run setup, the loop over steps, its evaluations and summary, stop signals."""
