"""Fine-tuning: tasks as token ids, examples packed into rows, the official classifier head and loop, protocols."""
