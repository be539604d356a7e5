#!/usr/bin/env bash
# Fills the ignored .h200/ with what h200_speed.sh needs on an H200 that reaches no registry: first
# everything h200_prepare.sh puts there (wheels, the built-in corpus, the prepared causal_14m workdir,
# ZhoBLiMP), then, for part (c):
#
#   .h200/official/          the official pipeline's scorer and fine-tuning trainer, copied from its
#                            commit 2c8a2d9 (evaluation_pipeline/{__init__.py,sentence_zero_shot,finetune};
#                            ~60 KB; nothing of theirs enters the repository)
#   .h200/official_stubs/    wandb.py and datasets.py: two modules that code imports at its top but
#                            never calls on these paths (W&B logging is off; ZhoBLiMP has no images),
#                            and that the device image lacks; what they name raises if it is ever called
#   .h200/afqmc_subset/afqmc.{train,valid}.jsonl   a fixed subset of afqmc in the official
#                            prepared shape (experiments/finetune_parity/make_data.py's afqmc_rows):
#                            every 8th training example (4,292) and every 4th dev one (1,079)
#
# From the repository root of the checkout that the device tool sends:
#
#   OFFICIAL=/path/to/chinese-babylm-eval-pipeline bash experiments/benchmarks/h200_speed_prepare.sh
#
# OFFICIAL is a clone of SiyuanSong2004/chinese-babylm-eval-pipeline (or its bare git directory)
# holding commit 2c8a2d9; BABYLM_DATA_DIR (default ../shared/data) holds afqmc/ and zhoblimp/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=.h200
DATA_DIR=${BABYLM_DATA_DIR:-../shared/data}
COMMIT=2c8a2d9
: "${OFFICIAL:?set OFFICIAL to a clone of SiyuanSong2004/chinese-babylm-eval-pipeline holding commit $COMMIT}"

bash experiments/benchmarks/h200_prepare.sh

rm -rf "$ROOT/official" "$ROOT/official_stubs" && mkdir -p "$ROOT/official" "$ROOT/official_stubs"
git -C "$OFFICIAL" archive "$COMMIT" \
  evaluation_pipeline/__init__.py evaluation_pipeline/sentence_zero_shot evaluation_pipeline/finetune \
  | tar -x -C "$ROOT/official"
echo "official code at $COMMIT: $(find "$ROOT/official" -name '*.py' | wc -l) files"
for module in wandb datasets; do
  cat > "$ROOT/official_stubs/$module.py" <<EOF
"""Stands in for $module on a machine without it: the official code imports it at its top, and
h200_speed.sh runs no path that calls it (it raises if one does)."""


def __getattr__(name):
    if name.startswith("__"):  # what import machinery and hasattr() ask: plainly absent
        raise AttributeError(name)

    def absent(*args, **kwargs):
        raise RuntimeError(f"$module.{name}: $module is not installed here; this stub only lets the official code import")

    return absent
EOF
done

# Apart from data/: a full_eval/ there would make it the official layout, where h200_check.sh's
# evaluate finds no zhoblimp/.
rm -rf "$ROOT/data/full_eval" && mkdir -p "$ROOT/afqmc_subset"
python - "$DATA_DIR/afqmc" "$ROOT/afqmc_subset" <<'EOF'
import json, pathlib, sys
sys.path.insert(0, "experiments/finetune_parity")
from make_data import afqmc_rows
source, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for split, name, every in (("train", "train.json", 8), ("valid", "dev.json", 4)):
    rows = afqmc_rows(source / name)[::every]
    with open(out / f"afqmc.{split}.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    print(f"afqmc {split}: {len(rows):,} rows")
EOF

du -sh "$ROOT"
total=$(du -sb "$ROOT" | cut -f1)
echo "carried: $((total / 1048576)) MiB of 64 (plus the tracked tree)"
[ "$total" -lt $((56 * 1048576)) ] || { echo "too large to carry" >&2; exit 1; }
