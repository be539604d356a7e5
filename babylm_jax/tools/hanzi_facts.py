"""Character facts as a training corpus: short Chinese sentences about how hanzi sound and are built.

    python -m babylm_jax.tools.hanzi_facts --out DIR [--characters N|FILE | --from_workdir W]
                                          [--words N | --share X [--budget B]] [--seed S] [--overwrite]

writes DIR/hanzi_facts.jsonl (one document per line, field "text": a paragraph of facts about one
character) and DIR/manifest.json (counts, sources, settings); the facts of an earlier run in DIR
are replaced only with --overwrite. Facts: reading with tone, initial
and final, tone; pairs of characters that share the reading / final / initial / tone (several
partners per relation in every paragraph, new ones each pass, so the passes cover many pairs)
and one that shares none (“如”跟“机”不同音。); radical, structure type, each part at its position
and one part set against another (如字的左边写“女”，“口”不在左边。). Finals are pypinyin's written
finals and are never called a rhyme (押韵). Every fact has several templates; the
wording and the partners are drawn from `--seed`, so a run is reproducible.

A run makes its own facts with `data.hanzi_facts` (prepare writes them into the workdir,
corpus/hanzi_facts.py); this command writes them anywhere, for a look or for `data.paths`.
`--words N` (or `--share X` of `--budget`) sets the size in official jieba words: passes over the
characters repeat, with new wording, until the next document would pass N. None of the sentences uses the wording of the probe set (experiments/hanzi_probe), so a probe
measures what a model knows, not which templates it memorised.
"""
from __future__ import annotations

import json
import pathlib
from typing import Sequence

import tqdm

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core.atomic import atomic_dir
from babylm_jax.corpus import hanzi_lexicon
from babylm_jax.corpus.hanzi_facts import MANIFEST, OUTPUT_FILE, write_documents
from babylm_jax.corpus.hanzi_lexicon import CharInfo, Lexicon

DEFAULT_BUDGET = 102_000_000


class FactsError(ValueError):
    """Bad input to the generator; the message names the option."""


def select_characters(lexicon: Lexicon, characters: str | None, from_workdir: str | None) -> list[CharInfo]:
    """The characters to state facts about, most frequent first, with what is known about them."""
    if from_workdir:
        counts = workdir_char_counts(pathlib.Path(from_workdir))
        ranked = sorted(counts, key=lambda c: (-counts[c], c))
    else:
        spec = characters or "3500"
        if spec.isdigit():
            if int(spec) <= 0:
                raise FactsError(f"--characters must be a positive number or a file of characters, got {spec!r}")
            ranked = hanzi_lexicon.common_characters()
        else:
            path = pathlib.Path(spec)
            if not path.is_file():
                raise FactsError(f"--characters: {spec!r} is neither a number nor a file of characters")
            try:
                text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is the encoding's, not a character
            except UnicodeDecodeError as error:
                raise FactsError(f"--characters {spec}: not UTF-8 text (byte {error.start}: {error.reason}); save it as "
                                 "UTF-8, e.g. iconv -f GBK -t UTF-8") from None
            ranked = list(dict.fromkeys(c for c in text if not c.isspace()))
    infos = [i for i in map(lexicon.info, ranked) if i is not None]
    if characters and characters.isdigit() and not from_workdir:
        infos = infos[: int(characters)]
    if not infos:
        option = "--from_workdir" if from_workdir else "--characters"
        raise FactsError(f"{option}: no hanzi with a known reading among the characters given")
    return infos


def workdir_char_counts(workdir: pathlib.Path) -> dict[str, int]:
    """Counts of the basic-block hanzi in the newest prepared corpus under `workdir/data`."""
    indexes = sorted((workdir / "data").glob("corpus-*/index.json"), key=lambda p: p.stat().st_mtime)
    if not indexes:
        raise FactsError(f"--from_workdir: {workdir} holds no prepared corpus (run babylm_jax.prepare first)")
    counts: dict[str, int] = {}
    for shard in sorted((indexes[-1].parent / "shards").iterdir()):
        for ch, n in json.loads((shard / "char_counts.json").read_text()).items():
            if hanzi_lexicon.is_cjk_basic(ch):
                counts[ch] = counts.get(ch, 0) + n
    return counts


def target_words(word_count: int | None, share: float | None, budget: int) -> int | None:
    """Words to generate (None = one pass over the characters); errors name the option."""
    if budget <= 0:
        raise FactsError(f"--budget must be positive, got {budget}")
    if share is not None:
        if not 0 < share <= 1:
            raise FactsError(f"--share must be in (0, 1] of --budget={budget:,}, got {share}")
        return int(share * budget)
    if word_count is not None:
        if not 0 < word_count <= budget:
            raise FactsError(f"--words must be in [1, --budget={budget:,}], got {word_count:,}")
    return word_count


def check_out(out: pathlib.Path, overwrite: bool) -> None:
    """Refuses an `out` that holds anything, unless `overwrite` and it holds earlier facts (a MANIFEST)."""
    if out.exists() and not out.is_dir():
        raise FactsError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MANIFEST).is_file():
            raise FactsError(f"--out {out} exists and is not a hanzi facts directory; choose another")
        if not overwrite:
            raise FactsError(f"--out {out} holds hanzi facts already ({OUTPUT_FILE}, {MANIFEST}); pass --overwrite "
                             "to replace them, or choose another --out")


def write_facts(out: pathlib.Path, infos: Sequence[CharInfo], words_wanted: int | None, seed: int,
                settings: dict, overwrite: bool = False) -> dict:
    """Writes the facts file and manifest into `out` atomically (earlier facts there only with
    `overwrite`); returns the manifest."""
    check_out(out, overwrite)
    bar = tqdm.tqdm(total=words_wanted or len(infos), unit="word" if words_wanted else "doc", desc="hanzi facts",
                    leave=False)
    with atomic_dir(out, replace=True) as tmp:
        manifest = {**write_documents(tmp / OUTPUT_FILE, infos, words_wanted, seed, progress=bar.update),
                    "settings": settings}
        (tmp / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    bar.close()
    return manifest


COMMAND = cli.Command("hanzi_facts", __doc__)
_OUT = flags.DEFINE_string("out", None, "Output directory (written atomically).", flag_values=COMMAND.flags,
                           required=True)
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace the facts of an earlier run in --out.",
                                  flag_values=COMMAND.flags)
_CHARACTERS = flags.DEFINE_string("characters", None, "N most frequent GB 2312 hanzi (default 3500), or a file of "
                                  "characters.", flag_values=COMMAND.flags)
_FROM_WORKDIR = flags.DEFINE_string("from_workdir", None, "The hanzi of this prepared run's corpus, most frequent "
                                    "first.", flag_values=COMMAND.flags)
_WORDS = flags.DEFINE_integer("words", None, "Size in official jieba words (default: one pass).",
                              flag_values=COMMAND.flags)
_SHARE = flags.DEFINE_float("share", None, "Size as a share of --budget.", flag_values=COMMAND.flags)
_BUDGET = flags.DEFINE_integer("budget", DEFAULT_BUDGET, "Word budget for --share / --words.", flag_values=COMMAND.flags)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the wordings.", flag_values=COMMAND.flags)
flags.mark_flags_as_mutual_exclusive(["characters", "from_workdir"], flag_values=COMMAND.flags)
flags.mark_flags_as_mutual_exclusive(["words", "share"], flag_values=COMMAND.flags)


def main(argv: Sequence[str]) -> dict:
    """Parses `argv` (program name first), writes the facts; returns the manifest."""
    COMMAND.parse(argv)
    settings = {name: COMMAND.flags[name].value for name in ("characters", "from_workdir", "words", "share", "budget", "seed")}
    wanted = target_words(_WORDS.value, _SHARE.value, _BUDGET.value)
    check_out(pathlib.Path(_OUT.value), _OVERWRITE.value)  # before the lexicon is read
    infos = select_characters(Lexicon(), _CHARACTERS.value, _FROM_WORKDIR.value)
    manifest = write_facts(pathlib.Path(_OUT.value), infos, wanted, _SEED.value, settings, _OVERWRITE.value)
    print(f"{manifest['documents']:,} documents, {manifest['words']:,} jieba words about "
          f"{manifest['characters']:,} characters ({manifest['passes']:.2f} passes) -> {_OUT.value}/{OUTPUT_FILE}")
    return manifest


if __name__ == "__main__":
    COMMAND.run(main)
