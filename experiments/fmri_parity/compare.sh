#!/bin/bash
# The discourse fmri task scored by the official pipeline and by babylm_jax on the same model and data.
#
#   OFFICIAL=/path/to/chinese-babylm-eval-pipeline OFFICIAL_PY=/path/to/its/venv/bin/python \
#   bash experiments/fmri_parity/compare.sh OUT WORKDIR EXPORT DATA [evaluate overrides...]
#
# WORKDIR is a training run, EXPORT its `python -m babylm_jax.export` output, DATA a folder holding
# cogbench/ (e.g. `python -m babylm_jax.tools.fmri_synth --out DATA`). The official code runs in its
# own environment (its requirements, CPU torch); prints one row per ROI x subject.
set -euo pipefail
OUT=$1; WORKDIR=$2; EXPORT=$3; DATA=$4; shift 4
: "${OFFICIAL:?set OFFICIAL to a checkout of the official pipeline}" "${OFFICIAL_PY:?set OFFICIAL_PY to its python}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ ! -f "$OUT/official.done" ]; then
  (cd "$OFFICIAL" && "$OFFICIAL_PY" -m evaluation_pipeline.cogbench.run --data_path "$DATA/cogbench" --task fmri \
     --model_path_or_name "$EXPORT" --output_dir "$OUT/official" --save_predictions > "$OUT/official.log" 2>&1)
  touch "$OUT/official.done"
fi
python -m babylm_jax.evaluate --workdir "$WORKDIR" --data_dir "$DATA" --tasks fmri --output "$OUT/ours/results.json" \
  --config.fmri.fmri.layers=-1 "$@" > "$OUT/ours.log" 2>&1
python - "$OUT" <<'PY'
import glob, json, os, sys
import numpy as np, scipy.io
out = sys.argv[1]
official = {}
for path in sorted(glob.glob(f"{out}/official/*/main/cogbench/fmri/*/*_average.mat")):
    roi, subject = path.split("/")[-2], os.path.basename(path)[:-len("_average.mat")]
    mat = scipy.io.loadmat(path)
    official[f"{roi}/{subject}"] = (float(np.mean(mat["test_corrs"])), float(mat["best_alpha"].squeeze()))
ours = json.load(open(f"{out}/ours/results_details.json"))["tasks"]["fmri"]
print("| ROI/subject | official | ours | ours - official | alpha official | alpha ours |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
diffs = []
for key, (score, alpha) in official.items():
    mine = ours["per_roi_subject"][key]
    diffs.append(mine - score)
    print(f"| {key} | {score:.6f} | {mine:.6f} | {mine - score:+.2e} | {alpha:.4g} | {ours['alphas'][key]:.4g} |")
print(f"mean: official {np.mean([s for s, _ in official.values()]):.6f}, ours {ours['values']['mean']:.6f}; "
      f"max |ours - official| {max(map(abs, diffs)):.2e}")
PY
