"""The Transformer stack shared by the causal, masked and hybrid families, and their losses."""
