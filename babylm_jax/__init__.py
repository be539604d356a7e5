"""babylm_jax: pretrain and score Chinese BabyLM language models in JAX/Flax."""
