"""babylm_jax: pretrain and score Chinese BabyLM language models in JAX/Flax."""
from babylm_jax.core import platforms

platforms.skip_absent_tpu()  # before any module imports jax: no libtpu start-up noise on a CPU host
