"""Pretraining, in sub-rooms that import one way: step/ <- checkpoints/, metrics/ <- accelerators/ <- loop/."""
