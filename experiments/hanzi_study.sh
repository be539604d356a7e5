#!/usr/bin/env bash
# Hanzi study (issue 26): one arm of the CPU recipe, trained, audited and scored; its row is
# appended to $OUT/results.jsonl and the table rewritten ($OUT/results.md).
#
#   ARM=facts_heads SHARE=0.3 bash experiments/hanzi_study.sh --config.train.aux_heads.syllable=0.3 ...
#
# Environment: ARM (row name, also the workdir $OUT/$ARM), SHARE (share of the total words that
# are facts; 0 = no facts), SEED (train.seed), FACTS_SEED (generator seed, default 0), STEPS
# (default 1200), CHARS (facts about the N most frequent hanzi, default 1000), OUT (default
# /work/runs/hanzi26), BABYLM_DATA_DIR. Every arm uses characters as tokens (6,000 ids, as the study
# ran) with data.tokenizer.required_characters=corpus_cjk (flags given later win) and base.py otherwise. A facts arm keeps the first builtin documents that
# fit beside the facts, so every arm has the no-facts arm's word count ($OUT/nofacts must exist).
set -euo pipefail
cd "$(dirname "$0")/.."
ARM=${ARM:?name the arm}
SHARE=${SHARE:-0.3}
SEED=${SEED:-0}
FACTS_SEED=${FACTS_SEED:-0}
STEPS=${STEPS:-1200}
CHARS=${CHARS:-1000}
OUT=${OUT:-/work/runs/hanzi26}
DATA=${BABYLM_DATA_DIR:-../shared/data}
RUN="$OUT/$ARM"
FLAGS=(--config.data.tokenizer.kind=char --config.model.vocab_size=6000
       --config.data.tokenizer.required_characters=corpus_cjk --config.train.num_steps="$STEPS"
       --config.train.seed="$SEED" --config.train.eval_tasks= "$@")
mkdir -p "$OUT/eval_data"
ln -sfn "$(realpath "$DATA/zhoblimp")" "$OUT/eval_data/zhoblimp"
for task in hanzi_structure hanzi_pinyin; do
  ln -sfn "$(realpath experiments/hanzi_probe/$task)" "$OUT/eval_data/$task"
done
CONFIG=configs/base.py
if [ "$SHARE" != 0 ]; then
  FACTS="$OUT/facts_${SHARE}_c${CHARS}_s${FACTS_SEED}"
  read -r TOTAL FACT_WORDS < <(python - "$OUT/nofacts/budget.json" "$SHARE" <<'EOF'
import json, sys
total = json.load(open(sys.argv[1]))["words"]
print(total, int(total * float(sys.argv[2])))
EOF
)
  [ -f "$FACTS/manifest.json" ] ||
    python -m babylm_jax.tools.hanzi_facts --out "$FACTS" --characters "$CHARS" --words "$FACT_WORDS" --seed "$FACTS_SEED"
  MAX_DOCS=$(python experiments/facts_max_documents.py "$OUT/nofacts" "$FACTS/manifest.json" "$TOTAL")
  CONFIG="$OUT/facts_config_${SHARE}.py"
  cat > "$CONFIG" <<CONFIG_END
from babylm_jax.config.files import load_config_file


def get_config():
    config = load_config_file("$(realpath configs/base.py)")
    config.data.corpus, config.data.paths = "$FACTS", ("builtin",)
    config.data.max_documents = $MAX_DOCS
    return config
CONFIG_END
fi
python -m babylm_jax.train --config "$CONFIG" --workdir "$RUN" "${FLAGS[@]}" > "$RUN.train.log" 2>&1
python -m babylm_jax.prepare --config "$CONFIG" --workdir "$RUN" --data_dir "$OUT/eval_data" "${FLAGS[@]}" > "$RUN/prepare_report.txt"
[ -f "$RUN/eval/results.json" ] ||
  python -m babylm_jax.evaluate --workdir "$RUN" --data_dir "$OUT/eval_data" \
    --tasks zhoblimp,hanzi_structure,hanzi_pinyin --output "$RUN/eval/results.json" > "$RUN.eval.log" 2>&1
python experiments/hanzi_study_table.py --out "$OUT" --arm "$ARM" --workdir "$RUN" --share "$SHARE" --seed "$SEED" --facts "${FACTS:-}" --flags "$*"
