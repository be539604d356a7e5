#!/bin/bash
# The six fine-tuned tasks scored by the official pipeline and by babylm_jax on the same model, data and protocol.
#
#   OFFICIAL=/path/to/chinese-babylm-eval-pipeline OFFICIAL_PY=/path/to/its/venv/bin/python \
#   bash experiments/finetune_parity/compare.sh OUT WORKDIR EXPORT DATA [seeds...]      (default seeds 42 43 44)
#
# WORKDIR is a training run, EXPORT its `python -m babylm_jax.export` output, DATA the folder of
# `python experiments/finetune_parity/make_data.py DATA --train_examples N`. Run from the repository
# root with babylm_jax's python first on PATH (or PYTHON=...). The protocol is config.yaml here (or
# CONFIG=...), in the official format of 2c8a2d9; per seed it is copied to OUT/config_seedS.yaml with
# the seed, EXPORT, DATA and OUT/official_seedS filled in, and both sides read that copy.
#
# Per seed, one after the other: the official `pipeline.py eval` on afqmc, ocnli, tnews and
# cluewsc2020; diagnostic_nli through the official trainer (the command pipeline.py builds for
# ocnli, validated and predicted on the diagnostic rows in its prepared shape); c3 has no official
# code at 2c8a2d9, so ours only; then `babylm_jax.evaluate` on all six. A (side, seed) whose results
# exist is skipped, so a rerun resumes. Logs in OUT/logs/; the table (table.py) in OUT/parity.json.
#
# OURS_WSC_AS_OVERRIDE=1: babylm_jax reads OUT/config_seedS.ours.yaml, the same file with
# `wsc_epochs: K` written as `task_overrides: {cluewsc2020: {max_epochs: K}}` (for a babylm_jax that
# does not read 2c8a2d9's wsc_epochs key yet; the same protocol).
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,9p' "$0" >&2; exit 2
fi
OUT=$1; WORKDIR=$2; EXPORT=$3; DATA=$4; shift 4
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(42 43 44)
: "${OFFICIAL:?set OFFICIAL to a checkout of the official pipeline}" "${OFFICIAL_PY:?set OFFICIAL_PY to its python}"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python}
CONFIG=${CONFIG:-$HERE/config.yaml}
OFFICIAL_TASKS=(afqmc ocnli tnews cluewsc2020)
OURS_TASKS=afqmc,ocnli,tnews,cluewsc2020,c3,diagnostic_nli
mkdir -p "$OUT/logs"
abspath() { (cd "$1" && pwd); }
OUT=$(abspath "$OUT"); WORKDIR=$(abspath "$WORKDIR"); EXPORT=$(abspath "$EXPORT"); DATA=$(abspath "$DATA")
STEM=$(basename "$EXPORT")
for f in "$DATA"/full_eval/clue/{afqmc,ocnli,tnews,cluewsc2020}.{train,valid}.jsonl "$DATA/diagnostic_nli/diagnostic.jsonl"; do
  [ -f "$f" ] || { echo "missing $f: make it with make_data.py" >&2; exit 2; }
done
FAILED=0
timed() {  # timed NAME LOG command...: runs the command, its output to LOG, and notes its wall time
  local name=$1 log=$2; shift 2
  local start=$(date +%s)
  echo "[compare] $name: running (log $log)"
  "$@" > "$log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" >> "$OUT/logs/times.tsv"
  [ $rc -eq 0 ] || { echo "[compare] $name: exit status $rc, see $log" >&2; FAILED=1; }
  return $rc
}

# The diagnostic rows in the official prepared shape {sentence1, sentence2, label int} (0 neutral, 1 entailment, 2 contradiction).
DIAG_VALID=$OUT/official_data/diagnostic_nli.valid.jsonl
mkdir -p "$OUT/official_data"
"$PY" - "$DATA/diagnostic_nli/diagnostic.jsonl" "$DIAG_VALID" <<'PY' || exit 1
import json, sys
labels = ("neutral", "entailment", "contradiction")
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    for line in src:
        if line.strip():
            row = json.loads(line)
            dst.write(json.dumps({"sentence1": row["sentence1"], "sentence2": row["sentence2"],
                                  "label": labels.index(row["label"])}, ensure_ascii=False) + "\n")
PY
echo "[compare] c3: no official code at 2c8a2d9 (its pipeline fine-tunes afqmc, ocnli, tnews, cluewsc2020 only): ours only"

for SEED in "${SEEDS[@]}"; do
  CFG=$OUT/config_seed$SEED.yaml
  OFFICIAL_RESULTS=$OUT/official_seed$SEED
  "$PY" - "$CONFIG" "$CFG" "$SEED" "$EXPORT" "$DATA" "$OFFICIAL_RESULTS" "${OURS_WSC_AS_OVERRIDE:-0}" <<'PY' || exit 1
import sys, yaml
src, dst, seed, export, data, results, wsc_as_override = sys.argv[1:]
config = yaml.safe_load(open(src, encoding="utf-8"))
config["models"] = [{"path": export, "backend": "causal"}]
config["eval_dir"], config["results_dir"] = data, results
config.setdefault("finetune_hparams", {})["seed"] = int(seed)
header = f"# {src} with seed {seed}, written by experiments/finetune_parity/compare.sh\n"
with open(dst, "w", encoding="utf-8") as f:
    f.write(header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
if wsc_as_override == "1":
    hparams = config["finetune_hparams"]
    if "wsc_epochs" in hparams:
        hparams.setdefault("task_overrides", {}).setdefault("cluewsc2020", {})["max_epochs"] = hparams.pop("wsc_epochs")
    with open(dst[:-len(".yaml")] + ".ours.yaml", "w", encoding="utf-8") as f:
        f.write(header + "# wsc_epochs written as a task override (OURS_WSC_AS_OVERRIDE=1)\n"
                + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
PY
  OURS_CFG=$CFG; [ "${OURS_WSC_AS_OVERRIDE:-0}" = 1 ] && OURS_CFG=$OUT/config_seed$SEED.ours.yaml

  # Official, the four tasks of its pipeline (pipeline.py itself skips a task whose results.txt exists).
  missing=()
  for task in "${OFFICIAL_TASKS[@]}"; do
    [ -f "$OFFICIAL_RESULTS/$STEM/main/finetune/$task/results.txt" ] || missing+=("$task")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    pushd "$OFFICIAL" > /dev/null
    timed "official seed $SEED ${missing[*]}" "$OUT/logs/official_seed$SEED.log" \
      "$OFFICIAL_PY" pipeline.py eval --config "$CFG" --tasks "${missing[@]}"
    popd > /dev/null
    for task in "${missing[@]}"; do
      [ -f "$OFFICIAL_RESULTS/$STEM/main/finetune/$task/results.txt" ] || {
        echo "[compare] official seed $SEED $task: no results.txt, see $OUT/logs/official_seed$SEED.log" >&2; FAILED=1; }
    done
  else
    echo "[compare] official seed $SEED: done before, skipped"
  fi

  # Official trainer on diagnostic_nli: pipeline.py's own command for ocnli (train ocnli.train.jsonl), valid/predict = the diagnostic rows.
  DIAG_RESULTS=$OUT/official_seed${SEED}_diagnostic_nli
  if [ ! -f "$DIAG_RESULTS/$STEM/main/finetune/ocnli/results.txt" ]; then
    pushd "$OFFICIAL" > /dev/null
    timed "official seed $SEED diagnostic_nli" "$OUT/logs/official_diagnostic_nli_seed$SEED.log" \
      "$OFFICIAL_PY" - "$CFG" "$DIAG_RESULTS" "$DIAG_VALID" <<'PY'
import subprocess, sys
import pipeline
config_path, results_dir, valid = sys.argv[1:]
cfg = pipeline._load_config(config_path)
hparams = cfg.get("finetune_hparams", {})
for key, value in (("lr", 3e-5), ("batch_size", 32), ("max_epochs", 10), ("wsc_epochs", 30),
                   ("sequence_length", 128), ("seed", 42)):  # pipeline.cmd_eval's defaults
    hparams.setdefault(key, value)
model = cfg["models"][0]
cmd = pipeline._build_finetune_cmd(model["path"], model["backend"], "ocnli", cfg["eval_dir"], results_dir, hparams)
for flag in ("--valid_data", "--predict_data"):
    cmd[cmd.index(flag) + 1] = valid
print("Command:", " ".join(map(str, cmd)), flush=True)
sys.exit(subprocess.run(cmd).returncode)
PY
    popd > /dev/null
  else
    echo "[compare] official seed $SEED diagnostic_nli: done before, skipped"
  fi

  # Ours, all six.
  if [ ! -f "$OUT/ours_seed$SEED/results.json" ]; then
    timed "ours seed $SEED" "$OUT/logs/ours_seed$SEED.log" \
      "$PY" -m babylm_jax.evaluate --workdir "$WORKDIR" --data_dir "$DATA" --tasks "$OURS_TASKS" \
        --output "$OUT/ours_seed$SEED/results.json" --config.finetune.protocol="$OURS_CFG"
  else
    echo "[compare] ours seed $SEED: done before, skipped"
  fi
done

"$PY" "$HERE/table.py" "$OUT" || FAILED=1
exit $FAILED
