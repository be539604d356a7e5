"""Training batches: documents packed into rows, and the grain pipeline that serves them per process."""
