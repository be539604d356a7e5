#!/usr/bin/env bash
# Hanzi track: a recipe with and without character facts at the same total word count, scored on
# the hanzi probe (experiments/hanzi_probe) and the full ZhoBLiMP.
#
#   bash experiments/hanzi_measure.sh [--config.KEY=VALUE ...]     # extra flags go to both runs
#
# Environment: CONFIG (default configs/base.py), OUT (default /work/runs/hanzi), BABYLM_DATA_DIR
# (default ../shared/data), EVAL_LIMIT (smoke runs: first N pairs per task), CHARS (facts about the N most frequent hanzi; the probe uses the top
# 1000), SHARE (share of the total words that are facts), SEED. Both runs use
# data.tokenizer.required_characters=corpus_cjk. The facts run keeps the first builtin documents
# that fit beside the facts (data.corpus = facts, data.paths = builtin, data.max_documents).
# Writes $NOFACTS (default $OUT/nofacts) and $OUT/facts (runs with eval/results.json), $OUT/facts_corpus/ and
# $OUT/summary.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/base.py}
OUT=${OUT:-/work/runs/hanzi}
DATA=${BABYLM_DATA_DIR:-../shared/data}
CHARS=${CHARS:-1000}
SHARE=${SHARE:-0.3}
SEED=${SEED:-0}
NOFACTS=${NOFACTS:-$OUT/nofacts}  # share one run without facts between settings
COMMON=(--config.data.tokenizer.required_characters=corpus_cjk "$@")
mkdir -p "$OUT/eval_data"
ln -sfn "$(realpath "$DATA/zhoblimp")" "$OUT/eval_data/zhoblimp"
for task in hanzi_structure hanzi_pinyin; do
  ln -sfn "$(realpath experiments/hanzi_probe/$task)" "$OUT/eval_data/$task"
done
evaluate() {
  [ -f "$1/eval/results.json" ] && return 0
  python -m babylm_jax.evaluate --workdir "$1" --data_dir "$OUT/eval_data" \
    --tasks zhoblimp,hanzi_structure,hanzi_pinyin --output "$1/eval/results.json" ${EVAL_LIMIT:+--limit "$EVAL_LIMIT"}
}
echo "== without facts ($CONFIG)"
python -m babylm_jax.train --config "$CONFIG" --workdir "$NOFACTS" "${COMMON[@]}"
evaluate "$NOFACTS"

echo "== facts: $SHARE of the words, $CHARS characters"
read -r TOTAL FACT_WORDS < <(python - "$NOFACTS/budget.json" "$SHARE" <<'EOF'
import json, sys
total = json.load(open(sys.argv[1]))["words"]
print(total, int(total * float(sys.argv[2])))
EOF
)
python -m babylm_jax.data.hanzi_facts --out "$OUT/facts_corpus" --characters "$CHARS" --words "$FACT_WORDS" --seed "$SEED"
MAX_DOCS=$(python - "$NOFACTS" "$OUT/facts_corpus/manifest.json" "$TOTAL" <<'EOF'
import json, pathlib, sys
import numpy as np
workdir, manifest, total = pathlib.Path(sys.argv[1]), json.load(open(sys.argv[2])), int(sys.argv[3])
index = sorted((workdir / "data").glob("corpus-*/index.json"), key=lambda p: p.stat().st_mtime)[-1]
shards = sorted((index.parent / "shards").iterdir())
doc_words = np.concatenate([np.load(s / "doc_words.npy") for s in shards])
keep = int(np.searchsorted(np.cumsum(doc_words), total - manifest["words"], side="right"))
print(manifest["documents"] + keep)
EOF
)
# data.paths is a list (not overridable on the command line): a config file sets the sources.
cat > "$OUT/facts_config.py" <<CONFIG_END
from babylm_jax.config_files import load_config_file


def get_config():
    config = load_config_file("$(realpath "$CONFIG")")
    config.data.corpus, config.data.paths = "$OUT/facts_corpus", ["builtin"]
    return config
CONFIG_END
python -m babylm_jax.train --config "$OUT/facts_config.py" --workdir "$OUT/facts" "${COMMON[@]}" \
  --config.data.max_documents="$MAX_DOCS"
evaluate "$OUT/facts"

python - "$OUT" "$NOFACTS" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows, summary = [], {}
for run, workdir in (("nofacts", pathlib.Path(sys.argv[2])), ("facts", out / "facts")):
    budget = json.loads((workdir / "budget.json").read_text())
    details = json.loads((workdir / "eval" / "results_details.json").read_text())
    scores = {t: details["tasks"][t]["accuracy"] for t in ("zhoblimp", "hanzi_structure", "hanzi_pinyin")}
    per_uid = {t: details["tasks"][t]["per_uid"] for t in ("hanzi_structure", "hanzi_pinyin")}
    facts = sum(s["words"] for name, s in budget["sources"].items() if name.endswith("facts_corpus"))
    summary[run] = {"words": budget["words"], "fact_words": facts, **scores, "per_uid": per_uid}
    rows.append(f"| {run} | {budget['words']:,} | {facts:,} | {scores['hanzi_structure']:.3f} | "
                f"{scores['hanzi_pinyin']:.3f} | {scores['zhoblimp']:.4f} |")
table = "\n".join(["| run | words | fact words | hanzi_structure | hanzi_pinyin | zhoblimp |",
                   "| --- | ---: | ---: | ---: | ---: | ---: |"] + rows)
(out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
(out / "summary.md").write_text(table + "\n")
print(table)
EOF
