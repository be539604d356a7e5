"""Zero-shot minimal pairs: the jitted sentence-scoring kernels, the task formats read as pairs, accuracy per UID."""
