#!/usr/bin/env bash
# Training throughput and MFU of the ~100M GPT-BERT hybrid recipe (configs/hybrid_100m.py)
# on one H200 in bf16, against the H200's table peak (989 TFLOP/s bf16 dense). Under 5 minutes.
#
#   bash experiments/benchmarks/h200_hybrid_100m.sh        # from anywhere; no arguments
#
# Installs the package (`pip install -e .`) and, when JAX does not see a GPU yet, the CUDA
# build of the same JAX version (`jax[cuda12]`); nothing else. Then times the real train step
# (LAMB, EMA, MNTP masking, one pass of 256 rows, scan + remat, cuDNN attention) at its last curriculum
# length (rows of 512) and its first (rows of 128), 256 x 512 tokens per step, and prints
# tokens/s, XLA's memory analysis, and `mfu_vs_table_peak[...]` per length; the last line is
# the lower of the two. Extra arguments go to train_throughput.py (e.g. --steps 10).
set -euo pipefail
cd "$(dirname "$0")/../.."

python -m pip install --quiet -e .
if ! python -c 'import jax, sys; sys.exit(jax.default_backend() != "gpu")' 2>/dev/null; then
  python -m pip install --quiet "jax[cuda12]==$(python -c 'import jax; print(jax.__version__)')"
fi
python -c 'import jax; d = jax.devices()[0]; print(f"JAX {jax.__version__} on {d.platform}: {d.device_kind}")'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# 2 compiles (~1 minute each at most) + 2 x 3 x 5 timed steps (~0.3 s each) + an 8192^2 matmul probe.
timeout 270 python experiments/benchmarks/train_throughput.py \
  --configs configs/hybrid_100m.py --peak table --lengths 512 128 \
  --steps 5 --repeats 3 --matmul_n 8192 "$@"
