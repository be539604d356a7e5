#!/usr/bin/env bash
# Hanzi track: a recipe with and without character facts at the same total word count, scored on
# the hanzi probe (experiments/hanzi_probe) and the full ZhoBLiMP.
#
#   bash experiments/hanzi_measure.sh [--config.KEY=VALUE ...]     # extra flags go to both runs
#
# Environment: CONFIG (default configs/base.py), OUT (default /work/runs/hanzi), BABYLM_DATA_DIR
# (default ../shared/data), EVAL_LIMIT (smoke runs: first N pairs per task), CHARS (facts about the N most frequent hanzi; the probe uses the top
# 1000), SHARE (share of the total words that are facts), SEED. Both runs use characters as tokens
# (6,000 ids, as measured) with data.tokenizer.required_characters=corpus_cjk. The facts run keeps the first builtin documents
# that fit beside the facts (data.corpus = facts, data.paths = builtin, data.max_documents).
# Writes $NOFACTS (default $OUT/nofacts) and $OUT/facts (runs with eval/results.json, leakage.json,
# unk_audit.json), $OUT/facts_corpus/ and
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
COMMON=(--config.data.tokenizer.kind=char --config.model.vocab_size=6000
        --config.data.tokenizer.required_characters=corpus_cjk "$@")
mkdir -p "$OUT/eval_data"
ln -sfn "$(realpath "$DATA/zhoblimp")" "$OUT/eval_data/zhoblimp"
for task in hanzi_structure hanzi_pinyin; do
  ln -sfn "$(realpath experiments/hanzi_probe/$task)" "$OUT/eval_data/$task"
done
evaluate() {  # leakage.json + unk_audit.json (prepare is cached), then the scores
  python -m babylm_jax.prepare --config "$2" --workdir "$1" --data_dir "$OUT/eval_data" "${COMMON[@]}" "${@:3}" > "$1/prepare_report.txt"
  [ -f "$1/eval/results.json" ] && return 0
  python -m babylm_jax.evaluate --workdir "$1" --data_dir "$OUT/eval_data" \
    --tasks zhoblimp,hanzi_structure,hanzi_pinyin --output "$1/eval/results.json" ${EVAL_LIMIT:+--limit "$EVAL_LIMIT"}
}
echo "== without facts ($CONFIG)"
python -m babylm_jax.train --config "$CONFIG" --workdir "$NOFACTS" "${COMMON[@]}"
evaluate "$NOFACTS" "$CONFIG"

echo "== facts: $SHARE of the words, $CHARS characters"
read -r TOTAL FACT_WORDS < <(python - "$NOFACTS/budget.json" "$SHARE" <<'EOF'
import json, sys
total = json.load(open(sys.argv[1]))["words"]
print(total, int(total * float(sys.argv[2])))
EOF
)
[ -f "$OUT/facts_corpus/manifest.json" ] ||  # kept on reruns (a new file would be a new corpus)
  python -m babylm_jax.tools.hanzi_facts --out "$OUT/facts_corpus" --characters "$CHARS" --words "$FACT_WORDS" --seed "$SEED"
MAX_DOCS=$(python experiments/facts_max_documents.py "$NOFACTS" "$OUT/facts_corpus/manifest.json" "$TOTAL")
# A config file sets both sources (data.corpus and data.paths) for this run.
cat > "$OUT/facts_config.py" <<CONFIG_END
from babylm_jax.config.files import load_config_file


def get_config():
    config = load_config_file("$(realpath "$CONFIG")")
    config.data.corpus, config.data.paths = "$OUT/facts_corpus", ("builtin",)
    return config
CONFIG_END
python -m babylm_jax.train --config "$OUT/facts_config.py" --workdir "$OUT/facts" "${COMMON[@]}" \
  --config.data.max_documents="$MAX_DOCS"
evaluate "$OUT/facts" "$OUT/facts_config.py" --config.data.max_documents="$MAX_DOCS"

python - "$OUT" "$NOFACTS" <<'EOF'
import json, pathlib, sys
from babylm_jax.corpus.tokenizer_kinds import load_tokenizer
from babylm_jax.corpus.tokenizer_training import is_cjk_unified
out = pathlib.Path(sys.argv[1])
probe = [json.loads(line) for path in sorted((out / "eval_data").glob("hanzi_*/*.jsonl")) for line in open(path)]
hanzi = sorted({c for row in probe for k in ("sentence_good", "sentence_bad") for c in row[k] if is_cjk_unified(c)})
rows, summary = [], {}
for run, workdir in (("nofacts", pathlib.Path(sys.argv[2])), ("facts", out / "facts")):
    budget = json.loads((workdir / "budget.json").read_text())
    details = json.loads((workdir / "eval" / "results_details.json").read_text())
    scores = {t: details["tasks"][t]["accuracy"] for t in ("zhoblimp", "hanzi_structure", "hanzi_pinyin")}
    per_uid = {t: details["tasks"][t]["per_uid"] for t in ("hanzi_structure", "hanzi_pinyin")}
    facts = sum(s["words"] for name, s in budget["sources"].items() if name.endswith("facts_corpus"))
    unk = sum(t["unk_items"] for t in json.loads((workdir / "unk_audit.json").read_text()).values())
    leaks = json.loads((workdir / "leakage.json").read_text())["tasks"]
    probe_leaked = sum(leaks[t]["leaked"] for t in ("hanzi_structure", "hanzi_pinyin"))
    tokenizer = load_tokenizer(workdir / "tokenizer")
    own = sum([tokenizer.id_to_piece(i) for i in tokenizer.encode(c)] == [c] for c in hanzi)
    summary[run] = {"words": budget["words"], "fact_words": facts, **scores, "unk_items": unk,
                    "probe_items_leaked": probe_leaked, "probe_hanzi_own_piece": f"{own}/{len(hanzi)}",
                    "per_uid": per_uid}
    rows.append(f"| {run} | {budget['words']:,} | {facts:,} | {scores['hanzi_structure']:.3f} | "
                f"{scores['hanzi_pinyin']:.3f} | {scores['zhoblimp']:.4f} | {unk} | {probe_leaked} | {own}/{len(hanzi)} |")
table = "\n".join(["| run | words | fact words | hanzi_structure | hanzi_pinyin | zhoblimp | UNK items | probe items leaked | probe hanzi with own id |",
                   "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"] + rows)
(out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
(out / "summary.md").write_text(table + "\n")
print(table)
EOF
