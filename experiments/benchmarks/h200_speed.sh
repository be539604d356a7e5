#!/usr/bin/env bash
# The speed of the train step and of evaluation on one H200, in one call of at most 8 minutes, every
# figure under $OUT. Prepare HERE first (once; fills the ignored .h200/, ~45 MiB):
#
#   OFFICIAL=/path/to/chinese-babylm-eval-pipeline bash experiments/benchmarks/h200_speed_prepare.sh
#
# then, from the session whose task is lent an H200 (the device tool sends that session's checkout,
# so prepare in that one):
#
#   run(command="bash experiments/benchmarks/h200_speed.sh", carry=[".h200"], timeout_s=560)
#
# and give the machine back unless you rerun at once. Dry run on this CPU (tiny sizes, JAX on the
# CPU, the image's packages stood in for as h200_check.sh does; PyTorch from $TORCH_PY, default
# /work/torch-venv/bin/python, a venv holding what the image has for parts c and e: torch,
# transformers, and the official code's imports aiohttp, pillow, scipy, scikit-learn, tqdm; without
# one, parts c and e say "skipped: no torch"):
#
#   H200_SPEED_DRY=1 bash experiments/benchmarks/h200_speed.sh      # ~8-15 minutes on 2 busy cores
#
# (its timeouts three times the device's, its budget 1800 s)
#
# Parts, run in the order 0 k a d c b e (a part that fails is recorded in summary.json, the next runs;
# each part's timeout is cut to what is left of the 480 s budget, H200_SPEED_BUDGET_S):
#   0 setup: the carried wheels into /tmp/site (no registry there), imports, jax's devices, nvidia-smi.
#   k kernels: kernel_check.py, the fused kernels' loss and gradients against the XLA forms at the
#     recipes' shapes (train.loss_kernel blockwise and pallas; model.norm_kernel pallas): kernel_check.json.
#   a levers: lever_sweep.py on hybrid_100m and causal_14m at rows of 512 (5 steps x 2 repeats):
#     baseline (the recipe, with the kernels it takes), kernels_xla (without them: the recipe as last
#     measured), loss_pallas, norm_pallas, kernels_pallas, loss_blockwise, then train.rng_impl=rbg,
#     train.loss_logits_dtype=bfloat16, model.remat=dots (hybrid), model.residual_dtype=bfloat16, rbg +
#     bfloat16 logits, and, if time is left, remat=none and dropout 0 (hybrid). Baselines first.
#     Tokens/s, MFU against 989 TFLOP/s, XLA's memory.
#   d moved: the carried prepared causal_14m workdir AND its corpus copied to new paths (cp -r: fresh
#     mtimes), 100 steps of train there: whether it counted the corpus again ("count words" lines),
#     tokens/s. Its final checkpoint is part c's model (should part d leave none, part c exports a
#     20-step run of the carried workdir with the corpus where it was carried).
#   c pipelines: part d's run exported (babylm_jax.export); on the same export and the same files
#     (every 4th ZhoBLiMP paradigm; the afqmc subset of h200_speed_prepare.sh, 2 epochs), the official
#     pipeline's own scorer and trainer (official_pipeline_timing.py: pairs/s; training and evaluation
#     examples/s) beside `python -m babylm_jax.evaluate --tasks zhoblimp,afqmc`; each side's time for
#     the official protocol's four fine-tuning tasks estimated from its afqmc rates.
#   b deterministic: causal_14m with XLA_FLAGS=--xla_gpu_deterministic_ops=true beside without, each
#     with model.embedding_grad=scatter and one_hot (lever_sweep.py, tags ops_default and
#     ops_deterministic: measured side by side, apart from part a's rows); then
#     scatter_check.py (jax#27796: .at[].set/.add and one_hot_scatter_add against numpy, with and
#     without the flag).
#   e torch: torch_reference_throughput.py, the PyTorch model of causal_14m's shape (GPT-2 classes) at
#     128 x 512 and of hybrid_100m's as a causal LM (Llama classes) at 256 x 512: bf16 autocast,
#     SDPA, torch.compile, fused AdamW; tokens/s and MFU beside part a's baselines.
# Rerun some parts (0, the install, is needed by all; c needs d's run in /tmp, so d with it on a fresh
# machine):
#   run(command="H200_SPEED_PARTS='0 b e' bash experiments/benchmarks/h200_speed.sh", carry=[".h200"], timeout_s=400)
# ($OUT starts empty on the device: a rerun's files hold its own parts' figures only.)
# Files back (8): log.txt, summary.json (every headline figure, each part's status and seconds), kernel_check.json,
# table.md (the tables), levers.json (parts a and b, one row per config x lever x tag),
# scatter_check.json, pipelines.json (part c: both sides' raw figures), torch_reference.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
DRY=${H200_SPEED_DRY:-0}
OUT=${OUT:-/tmp/h200_speed_out}
WORK=/tmp/h200_speed  # everything but the returned files
mkdir -p "$OUT" "$WORK"
LOG=$OUT/log.txt
: > "$LOG"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 TQDM_MININTERVAL=15
PARTS=${H200_SPEED_PARTS:-0 k a d c b e}
BUDGET=480; [ "$DRY" = 1 ] && BUDGET=1800
DEADLINE=$((SECONDS + ${H200_SPEED_BUDGET_S:-$BUDGET}))
SUMMARY=$OUT/summary.json
[ -f "$SUMMARY" ] || echo '{}' > "$SUMMARY"
say() { echo "[h200_speed $(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }
record() { python3 "$REPO/experiments/benchmarks/h200_speed_report.py" record "$SUMMARY" "$@"; }

# step PART LIMIT_S CMD...: CMD under timeout min(LIMIT_S, time left), output into the log; records
# status ran / failed (rc) / timed out / skipped (no time left) and seconds in summary.json.
step() {
  local part=$1 limit=$2; shift 2
  if [[ " ${PARTS} " != *" ${part%%_*} "* ]]; then say "$part: not asked for (H200_SPEED_PARTS=$PARTS)"; return 3; fi
  [ "$DRY" = 1 ] && limit=$((limit * 3))  # this CPU compiles several times slower than the device's 16 cores
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then say "$part: skipped (no time left)"; record "$part" status '"skipped: no time left"'; return 1; fi
  say "$part: $* (timeout ${limit}s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  record "$part" seconds $((SECONDS - start))
  if [ "$rc" -eq 0 ]; then record "$part" status '"ran"'
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then record "$part" status "\"timed out after ${limit}s\""
  else record "$part" status "\"failed: rc $rc\""; fi
  say "$part: rc $rc after $((SECONDS - start))s"
  return "$rc"
}

CARRY=$REPO/.h200
SITE=/tmp/site
PY=(python3)
TORCH=(python3)
if [ "$DRY" = 1 ]; then
  # As h200_check.sh: the venv less the carried packages; PyTorch and transformers from a venv of their own.
  source experiments/benchmarks/h200_dry_site.sh
  TORCH_PY=${TORCH_PY:-/work/torch-venv/bin/python}
  TORCH=("$TORCH_PY")
  [ -x "$TORCH_PY" ] && "$TORCH_PY" -c 'import torch, transformers' 2>/dev/null || TORCH=()
  say "dry run: JAX on the CPU; image packages from $VENV_SITE less the carried ones; torch: ${TORCH[*]:-none}"
fi
export PYTHONPATH=$SITE:$REPO${BASE:+:$BASE}
export JAX_COMPILATION_CACHE_DIR=$WORK/jax_cache  # part b's default causal baseline reuses part a's compile
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.92  # remat=none of hybrid_100m may want more than JAX's default 75%
record setup dry "$DRY"

# ---- 0: setup ----------------------------------------------------------------------------------
part0() {
  set -e
  local extra=()
  [ "$DRY" = 1 ] && extra=(--python-version 3.12 --only-binary=:all:)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "${extra[@]}" "$CARRY"/whl/*.whl
  [ "$DRY" = 1 ] && rm -rf "$SITE"/grain* "$SITE"/array_record*  # the venv's cp311 builds of these stand in
  "${PY[@]}" -c '
import importlib, jax
for name in ("ml_collections", "grain", "babylm_jax.train", "babylm_jax.evaluate", "babylm_jax.export"):
    importlib.import_module(name)
print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")'
  if [ ${#TORCH[@]} -gt 0 ]; then
    "${TORCH[@]}" -c 'import torch, transformers; print(f"torch {torch.__version__} (cuda: {torch.cuda.is_available()}), transformers {transformers.__version__}")'
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
}
step 0_setup 60 bash -c "$(declare -f part0); DRY=$DRY CARRY=$CARRY SITE=$SITE; PY=(${PY[*]}); TORCH=(${TORCH[*]}); part0"

if [ "$DRY" = 1 ]; then
  TINY=(--config.model.d_model=32 --config.model.d_ff=64 --config.model.num_layers=1 --config.model.num_heads=2
        --config.model.vocab_size=512 --config.train.batch_size=16 --config.train.seq_len=64)
  SWEEP=(--steps 1 --repeats 1 --compile_threads 2 "${TINY[@]}")
  A_BUDGET=450
else
  TINY=()
  SWEEP=(--steps 5 --repeats 2 --compile_threads 6)
  A_BUDGET=150  # seconds after which part a starts no lever
fi
LEVERS=$OUT/levers.json

# ---- k: the fused kernels' numbers against the XLA forms ---------------------------------------
KCHECK=(); [ "$DRY" = 1 ] && KCHECK=(--tiny)
step k_kernels 45 "${PY[@]}" experiments/benchmarks/kernel_check.py --out "$OUT/kernel_check.json" "${KCHECK[@]}"

# ---- a: levers ---------------------------------------------------------------------------------
step a_levers 190 "${PY[@]}" experiments/benchmarks/lever_sweep.py --configs configs/hybrid_100m.py configs/causal_14m.py \
  --levers baseline kernels_xla loss_pallas norm_pallas kernels_pallas loss_blockwise rng_rbg logits_bf16 remat_dots \
  residual_bf16 rbg_logits_bf16 remat_none no_dropout \
  --budget_s $A_BUDGET --out "$LEVERS" --tag default "${SWEEP[@]}"

# ---- d: a prepared workdir and its corpus moved ------------------------------------------------
MOVED=/tmp/moved_workdir_$$; MOVED_CORPUS=/tmp/moved_corpus_$$
rm -rf /tmp/moved_workdir_* /tmp/moved_corpus_*
cp -r "$CARRY/workdir" "$MOVED"; cp -r "$CARRY/corpus" "$MOVED_CORPUS"
if [ "$DRY" = 1 ]; then
  STEPS=20  # the prepared tokenizer's vocabulary stays: h200_check.sh's tiny model
  TRAIN_SET=(--allow_cpu --config.model.d_model=32 --config.model.d_ff=64 --config.model.num_layers=1
             --config.model.num_heads=2 --config.model.dtype=float32 --config.model.attention=reference
             --config.train.batch_size=4 --config.train.seq_len=64 --config.train.log_every_steps=5
             --config.train.warmup_steps=2 --config.train.eval_batches=2)
else
  STEPS=100; TRAIN_SET=(--config.train.log_every_steps=10 --config.train.warmup_steps=20 --config.train.eval_batches=4)
fi
TRAIN_SET+=(--config.data.corpus="$MOVED_CORPUS" --config.train.num_steps=$STEPS --config.checkpoint.every_steps=$STEPS
            --config.train.eval_every_steps=$STEPS --config.train.eval_tasks=)
FROM=$(($(wc -l < "$LOG") + 1))
step d_moved 75 "${PY[@]}" -m babylm_jax.train --config configs/causal_14m.py --workdir "$MOVED" "${TRAIN_SET[@]}"
tail -n +"$FROM" "$LOG" > "$WORK/moved_train.log"
python3 experiments/benchmarks/h200_speed_report.py moved "$SUMMARY" "$MOVED" "$WORK/moved_train.log"

# ---- c: the official pipeline beside ours, on one export ---------------------------------------
DATA=$WORK/data; EXPORT=$WORK/export/causal_14m_moved
rm -rf "$DATA" "$WORK/export" "$WORK/official_out" "$WORK/ours_eval"
mkdir -p "$DATA/full_eval/zhoblimp" "$DATA/full_eval/clue" "$WORK/export"
EVERY=4; [ "$DRY" = 1 ] && EVERY=40  # ZhoBLiMP paradigms: every 4th (~8,900 pairs); dry: 3
ls "$CARRY/data/zhoblimp/ZhoBLiMP/"*.jsonl | sort | awk -v every=$EVERY 'NR % every == 1' | while read -r f; do ln -s "$f" "$DATA/full_eval/zhoblimp/"; done
cp "$CARRY"/afqmc_subset/afqmc.*.jsonl "$DATA/full_eval/clue/"
[ "$DRY" = 1 ] && for f in "$DATA"/full_eval/clue/afqmc.*.jsonl; do head -n 96 "$f" > "$f.tmp" && mv "$f.tmp" "$f"; done
cat > "$WORK/protocol.yaml" <<EOF
# the official format (configs/config.yaml at 2c8a2d9): what both sides of part c fine-tune with
finetune_hparams: {lr: 3.0e-5, batch_size: 32, max_epochs: 2, wsc_epochs: 6, sequence_length: 128, seed: 42}
EOF
part_c() {
  set -e
  local run=$MOVED
  if ! ls "$MOVED/checkpoints" 2>/dev/null | grep -qE '^[0-9]+$'; then
    # part d left no checkpoint (it recounted, say): a short run of the carried workdir with the corpus
    # where it was prepared, as h200_check.sh trains (it too recounts where the corpus's key holds
    # its absolute path and that differs from the preparing machine's)
    run=$WORK/fallback_run
    echo "part d left no checkpoint in $MOVED: part c exports a 20-step run in $run instead"
    rm -rf "$run" && cp -r "$CARRY/workdir" "$run"
    timeout 60 "${PY[@]}" -m babylm_jax.train --config configs/causal_14m.py --workdir "$run" "${TRAIN_SET[@]}" \
      --config.data.corpus=.h200/corpus --config.train.num_steps=20 --config.checkpoint.every_steps=20 \
      --config.train.eval_every_steps=20 > "$WORK/fallback_train.log" 2>&1 \
      || { echo "the fallback run failed too (its log: $(grep -c 'count words' "$WORK/fallback_train.log") counting lines)"; exit 3; }
  fi
  "${PY[@]}" -m babylm_jax.export --workdir "$run" --output "$EXPORT"
  local official=(--official "$CARRY/official" --model "$EXPORT" --output_dir "$WORK/official_out")
  if [ ${#TORCH[@]} -gt 0 ]; then
    PYTHONPATH=$CARRY/official_stubs "${TORCH[@]}" experiments/benchmarks/official_pipeline_timing.py zero_shot "${official[@]}" \
      --data_path "$DATA/full_eval/zhoblimp" --out "$WORK/official_zhoblimp.json"
    PYTHONPATH=$CARRY/official_stubs "${TORCH[@]}" experiments/benchmarks/official_pipeline_timing.py finetune "${official[@]}" \
      --task afqmc --num_labels 2 --train_data "$DATA/full_eval/clue/afqmc.train.jsonl" \
      --valid_data "$DATA/full_eval/clue/afqmc.valid.jsonl" --epochs 2 --out "$WORK/official_afqmc.json"
  else
    echo "official pipeline: skipped: no torch"
  fi
  "${PY[@]}" -m babylm_jax.evaluate --workdir "$run" --data_dir "$DATA" --tasks zhoblimp,afqmc \
    --output "$WORK/ours_eval/results.json" --config.finetune.protocol="$WORK/protocol.yaml"
}
FROM=$(($(wc -l < "$LOG") + 1))
step c_pipelines 150 bash -c "$(declare -f part_c); set -e; MOVED=$MOVED EXPORT=$EXPORT WORK=$WORK DATA=$DATA CARRY=$CARRY
  PY=(${PY[*]}); TORCH=(${TORCH[*]}); TRAIN_SET=($(printf '%q ' "${TRAIN_SET[@]}")); part_c"
tail -n +"$FROM" "$LOG" > "$WORK/pipelines.log"
python3 experiments/benchmarks/h200_speed_report.py pipelines "$SUMMARY" "$OUT/pipelines.json" "$WORK" "$WORK/pipelines.log" \
  "${TORCH[*]:-}"

# ---- b: deterministic ops ----------------------------------------------------------------------
part_b() {
  local sweep=(experiments/benchmarks/lever_sweep.py --configs configs/causal_14m.py --levers baseline one_hot_embedding_grad
               --out "$LEVERS" "${SWEEP[@]}")
  XLA_FLAGS="${XLA_FLAGS:-}" "${PY[@]}" "${sweep[@]}" --tag ops_default
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true" "${PY[@]}" "${sweep[@]}" --tag ops_deterministic
  local sizes=(4 4096 262144); [ "$DRY" = 1 ] && sizes=(4 512)
  "${PY[@]}" experiments/benchmarks/scatter_check.py --out "$OUT/scatter_check.json" --sizes "${sizes[@]}"
}
step b_deterministic 120 bash -c "$(declare -f part_b); LEVERS=$LEVERS OUT=$OUT DRY=$DRY; PY=(${PY[*]}); SWEEP=(${SWEEP[*]}); part_b"

# ---- e: the PyTorch model of the same shape ----------------------------------------------------
part_e() {
  set -e
  if [ ${#TORCH[@]} -eq 0 ]; then echo "skipped: no torch"; exit 0; fi
  local extra=(--steps 10 --repeats 2); [ "$DRY" = 1 ] && extra=(--steps 2 --repeats 1)
  for config in causal_14m hybrid_100m; do
    "${PY[@]}" experiments/benchmarks/recipe_shape.py "configs/$config.py" "${TINY[@]}" > "$WORK/shape_$config.json"
    "${TORCH[@]}" experiments/benchmarks/torch_reference_throughput.py --shape "$WORK/shape_$config.json" \
      --out "$WORK/torch_$config.json" "${extra[@]}"
  done
}
rm -f "$WORK"/torch_*.json
step e_torch 150 bash -c "$(declare -f part_e); WORK=$WORK DRY=$DRY; PY=(${PY[*]}); TORCH=(${TORCH[*]}); TINY=(${TINY[*]}); part_e"
[ ${#TORCH[@]} -eq 0 ] && [[ " $PARTS " == *" e "* ]] && record e_torch status '"skipped: no torch"'

python3 experiments/benchmarks/h200_speed_report.py finish "$SUMMARY" "$OUT" "$WORK"
say "done in ${SECONDS}s; summary:"
tee -a "$LOG" < "$OUT/table.md"
