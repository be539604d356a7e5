# Sourced by h200_check.sh and h200_speed.sh for their dry runs on this CPU: the carried folder as the
# device would use it. The venv here is Python 3.11, so its own site-packages stands in for the image's
# packages, with every package the wheels carry (and jieba, snownlp) hidden: `python -S` and a farm of
# links to the rest. Sets JAX_PLATFORMS=cpu, SITE (a fresh --target for the wheels), BASE (the farm),
# VENV_SITE and PY.
export JAX_PLATFORMS=cpu
SITE=$(mktemp -d /tmp/h200_site.XXXX)
BASE=$(mktemp -d /tmp/h200_base.XXXX)
VENV_SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for entry in "$VENV_SITE"/*; do
  name=$(basename "$entry" | tr 'A-Z-' 'a-z_')
  case "$name" in
    ml_collections*|opencc*|portpicker*|importlib_resources*|jieba*|snownlp*|babylm_jax*|__editable__*) ;;
    *) ln -s "$entry" "$BASE/" ;;
  esac
done
PY=(python3 -S)
