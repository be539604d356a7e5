"""fMRI encoding: the CogBench readers, hidden-state features, ridge in JAX, the word_fmri and fmri tasks."""
