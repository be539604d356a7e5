#!/usr/bin/env bash
# The first H200 run (issue 36): four checks in one call, each with its own timeout, under 8 minutes
# in all, every result under $OUT. Prepare HERE first (once; fills the ignored .h200/):
#
#   bash experiments/benchmarks/h200_prepare.sh
#
# then, from the session whose task is lent an H200 (the device tool sends that session's checkout,
# so prepare in that one):
#
#   run(command="bash experiments/benchmarks/h200_check.sh", carry=[".h200"], timeout_s=540)
#
# and give the machine back. Dry run on this CPU (tiny configs and step counts, JAX on the CPU,
# cuDNN reported "skipped: no GPU", results in $OUT or /tmp/h200_check_out), to test the plumbing:
#
#   H200_CHECK_DRY=1 bash experiments/benchmarks/h200_check.sh
#
# Parts (a failing part is logged in summary.json and the next one runs):
#   0 setup: the carried wheels into /tmp/site (--no-index --no-deps: no registry there), the project
#     from PYTHONPATH=. (no install: setup.py's dependencies are what the wheels and the image hold);
#     imports of train, prepare, evaluate; jax's devices; nvidia-smi.
#   1 attention: attention_check.py, reference / xla / cudnn on bf16 packed rows, causal,
#     bidirectional and mixed: forward and gradient max abs and relative differences.
#   2 speed: train_throughput.py --peak table, hybrid_100m.py and causal_14m.py at rows of 512:
#     tokens/s, MFU against 989 TFLOP/s, XLA's memory analysis, the matmul probe's TFLOP/s.
#   3 resume: causal_14m.py from the carried workdir, 200 steps with a checkpoint at 100, twice: once
#     straight through (run_a), once stopped by SIGTERM after its checkpoint at 100 and resumed
#     (run_b); resume_check.py compares the logged losses.
#   4 scoring: evaluate --tasks zhoblimp on run_a's final checkpoint: pairs/s (CPU figure:
#     experiments/README.md, minimal_pairs_throughput.py, 1,173 causal pairs/s for base.py's model).
# A rerun of failed parts only (the first call's start and 8 minutes leave ~5 of the 15; part 4 scores
# part 3's run, so it needs 3 in the same call): e.g.
#   run(command="H200_CHECK_PARTS='0 3 4' bash experiments/benchmarks/h200_check.sh", carry=[".h200"], timeout_s=400)
# Files back (at most 8): log.txt, summary.json, attention.json, throughput.txt, resume.json,
# zhoblimp_results.json, zhoblimp_details.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
DRY=${H200_CHECK_DRY:-0}
OUT=${OUT:-/tmp/h200_check_out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 TQDM_MININTERVAL=15  # progress bars: a line each 15 s
PARTS=${H200_CHECK_PARTS:-0 1 2 3 4}  # a rerun of some parts: H200_CHECK_PARTS="0 3" (0, the install, is needed by all)
DEADLINE=$((SECONDS + ${H200_CHECK_BUDGET_S:-480}))  # every part's timeout is cut to what is left of this
SUMMARY=$OUT/summary.json
echo '{}' > "$SUMMARY"
say() { echo "[h200_check $(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }

# record PART KEY VALUE-as-JSON: one field of summary.json
record() { python3 - "$SUMMARY" "$1" "$2" "$3" <<'EOF'
import json, sys
path, part, key, value = sys.argv[1:]
s = json.load(open(path))
try:
    v = json.loads(value)
except ValueError:
    v = value
s.setdefault(part, {})[key] = v
json.dump(s, open(path, "w"), indent=1)
EOF
}

# step PART LIMIT_S CMD...: runs CMD with timeout min(LIMIT_S, time left), output into the log;
# records status ran / failed (rc) / timed out / skipped (no time left).
step() {
  local part=$1 limit=$2; shift 2
  if [[ " ${PARTS} " != *" ${part:4:1} "* ]]; then say "$part: not asked for (H200_CHECK_PARTS=$PARTS)"; return 0; fi
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then say "$part: skipped (no time left)"; record "$part" status skipped; return 1; fi
  say "$part: $* (timeout ${limit}s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  record "$part" seconds $((SECONDS - start))
  if [ "$rc" -eq 0 ]; then record "$part" status ran
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then record "$part" status "\"timed out after ${limit}s\""
  else record "$part" status "\"failed: rc $rc\""; fi
  say "$part: rc $rc after $((SECONDS - start))s"
  return "$rc"
}

CARRY=$REPO/.h200
SITE=/tmp/site
PY=(python3)
if [ "$DRY" = 1 ]; then
  source experiments/benchmarks/h200_dry_site.sh  # the venv less the carried packages, as the image has them
  say "dry run: JAX on the CPU; image packages from $VENV_SITE less the carried ones, wheels into $SITE"
fi
export PYTHONPATH=$SITE:$REPO${BASE:+:$BASE}
export JAX_COMPILATION_CACHE_DIR=/tmp/h200_jax_cache  # runs 3a/3b share their compiles

# ---- 0: setup ----------------------------------------------------------------------------------
part0() {
  set -e
  local extra=()
  # grain and array_record are cp312 builds: on the dry run's 3.11 they install (the command is the
  # device's) but the venv's own cp311 builds of the same versions are the ones imported
  [ "$DRY" = 1 ] && extra=(--python-version 3.12 --only-binary=:all:)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "${extra[@]}" "$CARRY"/whl/*.whl
  [ "$DRY" = 1 ] && rm -rf "$SITE"/grain* "$SITE"/array_record*  # the venv's cp311 builds of these stand in
  ls "$SITE"
  "${PY[@]}" - <<'EOF'
import importlib, sys
import jax
for name in ("ml_collections", "grain", "opencc", "babylm_jax.train", "babylm_jax.prepare", "babylm_jax.evaluate"):
    module = importlib.import_module(name)
    print(f"import {name}: {getattr(module, '__file__', '?')}")
for name in ("jieba", "snownlp"):
    print(f"{name}: {'present' if importlib.util.find_spec(name) else 'absent (not carried)'}")
print(f"python {sys.version.split()[0]}, jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
EOF
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
}
step part0_setup 60 bash -c "$(declare -f part0); DRY=$DRY CARRY=$CARRY SITE=$SITE; PY=(${PY[*]}); part0"

# ---- 1: attention ------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then ATT=(--batch 2 --length 64 --heads 2 --head_dim 16); else ATT=(--batch 4 --length 512 --heads 12 --head_dim 64); fi
step part1_attention 90 "${PY[@]}" experiments/benchmarks/attention_check.py "${ATT[@]}" --out "$OUT/attention.json"
[ -f "$OUT/attention.json" ] && record part1_attention worst_relative \
  "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["worst_relative"])' "$OUT/attention.json")"

# ---- 2: speed ----------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  TP=(--configs configs/causal_14m.py --lengths 64 --steps 1 --repeats 1 --matmul_n 256
      --config.model.d_model=32 --config.model.d_ff=64 --config.model.num_layers=1 --config.model.num_heads=2
      --config.train.batch_size=2 --config.train.seq_len=64 --config.model.dtype=float32 --config.model.attention=reference)
else
  # rows of 512: both recipes' (hybrid_100m's last curriculum phase); H200_CHECK_LENGTHS="512 128" adds its first
  TP=(--configs configs/hybrid_100m.py configs/causal_14m.py --lengths ${H200_CHECK_LENGTHS:-512} --steps 5 --repeats 3
      --matmul_n 8192)
fi
FROM=$(($(wc -l < "$LOG") + 1))
step part2_speed 180 "${PY[@]}" experiments/benchmarks/train_throughput.py --peak table "${TP[@]}"
# the lines worth reading, kept apart: devices, memory, tokens/s, MFU, the matmul probe
tail -n +"$FROM" "$LOG" | grep -E "devices:|params|memory|tokens/s|mfu|TFLOP|GFLOP|peak|WARNING|Error" \
  | grep -v "^\[h200_check" > "$OUT/throughput.txt" || true
record part2_speed lines "$(python3 -c 'import json,sys; print(json.dumps([l.strip() for l in open(sys.argv[1])
  if l.startswith(("mfu_vs", "peaks for", "matmul peak, this")) or "tokens/s best" in l]))' "$OUT/throughput.txt")"

# ---- 3: train, stop, resume --------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  STEPS=20; MID=10
  TRAIN_SET=(--allow_cpu --config.model.d_model=32 --config.model.d_ff=64 --config.model.num_layers=1
             --config.model.num_heads=2 --config.model.dtype=float32 --config.model.attention=reference
             --config.train.batch_size=4 --config.train.seq_len=64 --config.train.log_every_steps=1
             --config.train.warmup_steps=2 --config.train.eval_batches=2)
else
  STEPS=200; MID=100
  TRAIN_SET=(--config.train.log_every_steps=10 --config.train.warmup_steps=20 --config.train.eval_batches=4)
fi
TRAIN_SET+=(--config.data.corpus=.h200/corpus --config.train.num_steps=$STEPS --config.checkpoint.every_steps=$MID
            --config.train.eval_every_steps=$STEPS --config.train.eval_tasks=)
RUN_A=/tmp/h200_run_a; RUN_B=/tmp/h200_run_b
rm -rf "$RUN_A" "$RUN_B"; cp -r "$CARRY/workdir" "$RUN_A"; cp -r "$CARRY/workdir" "$RUN_B"
TRAIN=/tmp/h200_train.sh  # `bash $TRAIN WORKDIR`: the same command for every run
{ printf 'exec'; printf ' %q' "${PY[@]}" -m babylm_jax.train --config configs/causal_14m.py; printf ' --workdir "$1"'
  printf ' %q' "${TRAIN_SET[@]}"; echo; } > "$TRAIN"
cat "$TRAIN" >> "$LOG"
STOP=/tmp/h200_stop.sh  # run_b: train in the background, SIGTERM once checkpoint $MID is final, then wait
cat > "$STOP" <<EOF
bash $TRAIN $RUN_B &
pid=\$!
until [ -d $RUN_B/checkpoints/$MID ] || ! kill -0 \$pid 2>/dev/null; do sleep 0.2; done
kill -TERM \$pid 2>/dev/null && echo "SIGTERM sent after checkpoint $MID appeared"
wait \$pid; rc=\$?
echo "stopped run: rc \$rc (143 = stopped by SIGTERM, with a checkpoint of its last step)"
ls $RUN_B/checkpoints
[ \$rc -eq 143 ] || [ \$rc -eq 0 ]
EOF

step part3a_uninterrupted 150 bash "$TRAIN" "$RUN_A"
step part3b_stopped 120 bash "$STOP"
RESUMED_FROM=$(ls "$RUN_B/checkpoints" 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -1)
record part3b_stopped resumed_from "${RESUMED_FROM:-null}"
step part3c_resumed 120 bash "$TRAIN" "$RUN_B"
step part3d_compare 30 python3 experiments/benchmarks/resume_check.py "$RUN_A" "$RUN_B" \
  --resumed_from "${RESUMED_FROM:-0}" --out "$OUT/resume.json"

# ---- 4: scoring --------------------------------------------------------------------------------
EVAL_SET=()
[ "$DRY" = 1 ] && EVAL_SET=(--limit 200)
step part4_zhoblimp 120 "${PY[@]}" -m babylm_jax.evaluate --workdir "$RUN_A" --data_dir "$CARRY/data" \
  --tasks zhoblimp --output "$RUN_A/eval/results.json" "${EVAL_SET[@]}"
cp "$RUN_A/eval/results.json" "$OUT/zhoblimp_results.json" 2>/dev/null
cp "$RUN_A/eval/results_details.json" "$OUT/zhoblimp_details.json" 2>/dev/null

python3 - "$SUMMARY" "$RUN_A" "$OUT/resume.json" "$RUN_A/eval/results_details.json" <<'EOF'
# the figures of parts 3 and 4 into summary.json: run_a's tokens/s and MFU (median of its logged
# steps after the first), the resume's loss differences, and zhoblimp's pairs/s
import json, statistics, sys
path, run_a, resume, details = sys.argv[1:]
s = json.load(open(path))
try:
    rows = [json.loads(l) for l in open(f"{run_a}/metrics.jsonl")]
    train = [r for r in rows if "tokens_per_s" in r][1:]
    s.setdefault("part3a_uninterrupted", {}).update(
        median_tokens_per_s=statistics.median(r["tokens_per_s"] for r in train),
        median_mfu=statistics.median(r["mfu"] for r in train), final_loss=train[-1]["loss"])
except (OSError, ValueError, KeyError, IndexError, statistics.StatisticsError) as e:
    print(f"no run_a figures: {e}")
try:
    r = json.load(open(resume))
    s.setdefault("part3d_compare", {}).update({k: r[k] for k in ("resumed_from", "before_resume", "after_resume")})
except (OSError, ValueError, KeyError) as e:
    print(f"no resume figures: {e}")
try:
    t = json.load(open(details))["tasks"]["zhoblimp"]
    s.setdefault("part4_zhoblimp", {}).update(
        pairs=t["num_items"], seconds_scoring=t["seconds"], pairs_per_s=t["num_items"] / max(t["seconds"], 1e-9),
        accuracy=t["accuracy"], cpu_pairs_per_s="1,173 causal pairs/s, base.py's model (d128 x 4, vocab 6000), "
        "rows of 32 x 256, idle 2-core CPU (experiments/README.md, minimal_pairs_throughput.py)")
except (OSError, ValueError, KeyError) as e:
    print(f"no zhoblimp figures: {e}")
json.dump(s, open(path, "w"), indent=1)
EOF
say "done in ${SECONDS}s; summary:"
tee -a "$LOG" < "$SUMMARY"
