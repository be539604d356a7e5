"""How a command runs on this host: the JAX platforms it tries, pools of worker processes, progress lines."""
