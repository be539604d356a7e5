"""babylm_jax: pretrain and score Chinese BabyLM language models in JAX/Flax."""
from babylm_jax.core import platforms, starting

starting.stop_while_starting()  # `python -m babylm_jax.<command>`: a stop during its imports is one line
platforms.skip_absent_tpu()  # before any module imports jax: no libtpu start-up noise on a CPU host
if starting.command_name() is not None:
    platforms.start_xla_flags_check()  # XLA reads XLA_FLAGS in a subprocess while the command imports
