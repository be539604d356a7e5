"""Writes the hanzi probe set: hanzi_structure/ and hanzi_pinyin/ in the official prepared format.

    python experiments/hanzi_probe/make_probe.py [--characters 1000] [--pairs 60] [--seed 1234]

Each row: sentence_good, sentence_bad, UID, phenomenon. The sentences use templates in the
style of the official hanzi tasks (“汞”字上边的部分是“工”。, “伴”和“办”的声母、韵母和声调完全相同。)
that babylm_jax.tools.hanzi_facts never uses (PROBE_MARKERS; tests/test_hanzi_facts.py checks
it), so a model scores above chance only by knowing the facts. The bad sentence changes one
character (or one tone) of the good one; characters come from the N most frequent GB 2312 hanzi.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random

from babylm_jax.core.atomic import atomic_write_text
from babylm_jax.corpus import hanzi_lexicon

HERE = pathlib.Path(__file__).parent
# Phrases that mark the probe's templates; none occurs in the generated facts.
PROBE_MARKERS = ("的部分是", "的部首是", "结构类型为", "字里有", "完全相同", "的声母相同", "的韵母相同", "的声调相同",
                 "的拼音是")
_TONE_MARKS = {"a": "āáǎà", "o": "ōóǒò", "e": "ēéěè", "i": "īíǐì", "u": "ūúǔù", "ü": "ǖǘǚǜ"}


def _retone(marked: str, tone: int) -> str:
    """`marked` with its tone mark replaced by `tone` (1-4)."""
    for base, marks in _TONE_MARKS.items():
        for mark in marks:
            if mark in marked:
                return marked.replace(mark, marks[tone - 1])
    return marked


def structure_pairs(infos, rng: random.Random, n: int) -> list[dict]:
    rows = []
    two_parts = [i for i in infos if len(i.parts) >= 2 and len({c for _, c in i.parts}) == len(i.parts)]
    for info in rng.sample(two_parts, min(n, len(two_parts))):
        (position, part), (_, other) = rng.sample(info.parts, 2)
        rows.append(_row(f"“{info.char}”字{position}的部分是“{part}”。", f"“{info.char}”字{position}的部分是“{other}”。",
                         "part_position", info.structure))
    radicals = sorted({i.radical for i in infos if i.radical})
    for info in rng.sample([i for i in infos if i.radical], n):
        wrong = rng.choice([r for r in radicals if r != info.radical and r not in {c for _, c in info.parts}])
        rows.append(_row(f"“{info.char}”字的部首是“{info.radical}”。", f"“{info.char}”字的部首是“{wrong}”。",
                         "radical", "部首"))
    typed = [i for i in infos if i.structure in ("左右", "上下", "独体")]
    for info in rng.sample(typed, n):
        wrong = rng.choice([s for s in ("左右", "上下", "独体") if s != info.structure])
        # "独体结构", not "独体字": all three names are four characters, so length favours none.
        rows.append(_row(f"“{info.char}”字的结构类型为{info.structure}结构。",
                         f"“{info.char}”字的结构类型为{wrong}结构。", "structure_type", info.structure))
    parts = sorted({c for i in infos for _, c in i.parts})
    for info in rng.sample([i for i in infos if i.parts], n):
        part = rng.choice(info.parts)[1]
        wrong = rng.choice([p for p in parts if p not in {c for _, c in info.parts} and p != info.radical])
        rows.append(_row(f"“{info.char}”字里有“{part}”。", f"“{info.char}”字里有“{wrong}”。", "has_part", "部件"))
    return rows


_RELATIONS = {
    "same_syllable": ("的声母、韵母和声调完全相同", lambda r: (r.initial, r.final, r.tone)),
    "same_initial": ("的声母相同", lambda r: r.initial),
    "same_final": ("的韵母相同", lambda r: r.final),
    "same_tone": ("的声调相同", lambda r: r.tone),
}


def pinyin_pairs(infos, rng: random.Random, n: int) -> list[dict]:
    rows = []
    for uid, (predicate, key) in _RELATIONS.items():
        groups: dict = {}
        for info in infos:
            if key(info.readings[0]) != "":
                groups.setdefault(key(info.readings[0]), []).append(info)
        candidates = [i for i in infos if len(groups.get(key(i.readings[0]), ())) > 1]
        for info in rng.sample(candidates, min(n, len(candidates))):
            value = key(info.readings[0])
            partner = rng.choice([o for o in groups[value] if o.char != info.char])
            wrong = rng.choice([o for o in infos if all(key(r) != value for r in o.readings)])
            rows.append(_row(f"“{info.char}”和“{partner.char}”{predicate}。",
                             f"“{info.char}”和“{wrong.char}”{predicate}。", uid, uid))
    toned = [i for i in infos if i.readings[0].tone < 5]
    for info in rng.sample(toned, n):
        reading = info.readings[0]
        tone = rng.choice([t for t in (1, 2, 3, 4) if t != reading.tone and all(
            r.marked != _retone(reading.marked, t) for r in info.readings)])
        rows.append(_row(f"“{info.char}”的拼音是{reading.marked}。", f"“{info.char}”的拼音是{_retone(reading.marked, tone)}。",
                         "reading_tone", "reading_tone"))
    return rows


def _row(good: str, bad: str, uid: str, phenomenon: str) -> dict:
    return {"sentence_good": good, "sentence_bad": bad, "UID": uid, "phenomenon": phenomenon}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--characters", type=int, default=1000, help="the N most frequent GB 2312 hanzi")
    parser.add_argument("--pairs", type=int, default=60, help="pairs per UID")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    lexicon = hanzi_lexicon.Lexicon()
    infos = [i for i in map(lexicon.info, hanzi_lexicon.common_characters()) if i][: args.characters]
    rng = random.Random(args.seed)
    for task, rows in (("hanzi_structure", structure_pairs(infos, rng, args.pairs)),
                       ("hanzi_pinyin", pinyin_pairs(infos, rng, args.pairs))):
        path = pathlib.Path(args.out) / task / f"{task}_probe.jsonl"
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} pairs -> {path}")


if __name__ == "__main__":
    main()
