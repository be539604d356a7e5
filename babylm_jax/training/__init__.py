"""Pretraining, read in this order: step (the jitted steps), state (train state, optimizer), sharding,
run_config and checkpoints (resuming), metrics (FLOPs, tokens/s, MFU, metrics.jsonl), run (its setup),
compiled (every step compiled before step 1), in_run_eval, summary and loop (the loop over steps);
devices and aot_report for the backend and the compile-only report."""
