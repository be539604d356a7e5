"""Paragraphs of facts about hanzi: the sentence templates of every fact and `FactWriter`, which words them.

    writer = FactWriter(infos, seed)   # infos: hanzi_lexicon.CharInfo of the chosen characters
    writer.paragraph(info)             # every fact about one character, in a random wording and order
    writer.documents()                 # paragraphs, pass after pass over the characters

`corpus/hanzi_facts.py` writes them as a corpus source (prepare, and the command `tools/hanzi_facts.py`).
"""
from __future__ import annotations

import random
from typing import Callable, Iterator, Sequence

from babylm_jax.corpus import hanzi_lexicon
from babylm_jax.corpus.hanzi_lexicon import CharInfo

_NUMERALS = {1: "一", 2: "二", 3: "三", 4: "四"}
_MAX_PASSES = 10_000


def tone_words(tone: int) -> str:
    return "轻声" if tone == 5 else f"第{_NUMERALS[tone]}声"


def _q(ch: str) -> str:
    return f"“{ch}”"


def _listing(chars: Sequence[str]) -> str:
    return "、".join(_q(c) for c in chars)


# Each template: (CharInfo, helper) -> sentence. Helper gives related characters.
_READING = (
    lambda i, r: f"{i.char}字读作{r.marked}。",
    lambda i, r: f"{_q(i.char)}这个字念{r.marked}，是{hanzi_lexicon.TONE_NAMES[r.tone]}。",
    lambda i, r: f"{i.char}的读音是{r.marked}，声调是{tone_words(r.tone)}。",
    lambda i, r: f"我们把{_q(i.char)}读成{r.marked}。",
    lambda i, r: f"{_q(i.char)}注音为{r.marked}。",
    lambda i, r: f"{_q(i.char)}的读音：{r.marked}。",
    lambda i, r: f"{_q(i.char)}字拼作{r.marked}。",
)
_SOUNDS = (
    lambda i, r: (f"{_q(i.char)}的声母是{r.initial}，韵母是{r.final}。" if r.initial
                  else f"{_q(i.char)}是零声母字，韵母是{r.final}。"),
    lambda i, r: (f"{i.char}字的拼音{r.marked}里，{r.initial}是声母，{r.final}是韵母。" if r.initial
                  else f"{i.char}字的拼音{r.marked}没有声母，韵母是{r.final}。"),
    lambda i, r: f"{i.char}读{r.marked}，韵母为{r.final}，声调为{tone_words(r.tone)}。",
)
_TONE = (
    lambda i, r: f"{_q(i.char)}读{tone_words(r.tone)}。",
    lambda i, r: f"{i.char}字的声调是{hanzi_lexicon.TONE_NAMES[r.tone]}，也就是{tone_words(r.tone)}。",
)
# Relations between two characters (r: the first one's reading, o: the other character). Every
# pair sentence starts with the two characters, “A”…“B”, and names the relation after them.
_PAIR = {
    "syllable": (
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}同音，都读{r.marked}。",
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}读音一样，都念{r.marked}。",
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}是同音字，读{r.marked}。",
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}读音完全一样，都是{r.marked}。",
    ),
    "initial": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}的拼音都以{r.initial}开头。",
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}声母一样，都是{r.initial}。",
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}是同声母的字，声母都是{r.initial}。",
        lambda i, r, o: f"{_q(i.char)}{_q(o)}两个字的声母都是{r.initial}。",
    ),
    "final": (
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}的拼音韵母都写作{r.final}。",
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}韵母一样，都是{r.final}。",
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}的韵母都是{r.final}。",
        lambda i, r, o: f"{_q(i.char)}{_q(o)}两字的韵母都是{r.final}。",
    ),
    "tone": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}都读{tone_words(r.tone)}。",
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}声调一样，都是{tone_words(r.tone)}。",
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}同为{tone_words(r.tone)}字。",
        lambda i, r, o: f"{_q(i.char)}{_q(o)}两个字都念{hanzi_lexicon.TONE_NAMES[r.tone]}。",
    ),
}
# The same relations denied (o shares the property under none of its readings): “A”…“B”…不….
# Finals are pypinyin's written finals; no sentence calls them a rhyme (一 yi and 时 shi share
# the written final i, not a rhyme).
_NOT_PAIR = {
    "syllable": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}读音不同，{_q(i.char)}读{r.marked}。",
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}不同音。",
    ),
    "initial": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}的声母不一样，{_q(i.char)}的声母是{r.initial}。",
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}声母不同。",
    ),
    "final": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}的韵母不一样，{_q(i.char)}的韵母是{r.final}。",
        lambda i, r, o: f"{_q(i.char)}跟{_q(o)}韵母不同。",
    ),
    "tone": (
        lambda i, r, o: f"{_q(i.char)}和{_q(o)}的声调不一样，{_q(i.char)}读{tone_words(r.tone)}。",
        lambda i, r, o: f"{_q(i.char)}与{_q(o)}声调不同。",
    ),
}
# A list of characters that share a property: (CharInfo, reading, others) -> sentence.
_GROUP = {
    "syllable": lambda i, r, o: f"读{r.marked}的字有{_listing((i.char,) + tuple(o))}等。",
    "initial": lambda i, r, o: f"声母为{r.initial}的字，比如{_listing((i.char,) + tuple(o))}。",
    "final": lambda i, r, o: f"韵母是{r.final}的字有{_listing((i.char,) + tuple(o))}。",
    "tone": lambda i, r, o: f"{tone_words(r.tone)}的字有{_listing((i.char,) + tuple(o))}。",
}
_RELATIONS = ("syllable", "final", "initial", "tone")
PAIRS_PER_RELATION = 3  # partners stated one by one, per character and relation, in each paragraph
_RADICAL = (
    lambda i: f"{_q(i.char)}归{_q(i.radical)}部。",
    lambda i: f"查字典时，{_q(i.char)}要查{_q(i.radical)}部。",
    lambda i: f"{i.char}字以{_q(i.radical)}为部首。",
    lambda i: f"{_q(i.char)}在字典里属于{i.radical}部。",
)


def _structure_name(structure: str) -> str:
    if structure in hanzi_lexicon.SURROUNDS and structure != "全包围":
        return f"{structure}结构（半包围结构）"
    return f"{structure}结构"


_STRUCTURE = (
    lambda i: f"{_q(i.char)}是一个{_structure_name(i.structure)}的字。",
    lambda i: f"从结构上看，{i.char}字属于{_structure_name(i.structure)}。",
    lambda i: f"{i.char}字的结构是{_structure_name(i.structure)}。",
    lambda i: f"{_q(i.char)}字为{_structure_name(i.structure)}。",
    lambda i: f"{_q(i.char)}字的字形是{_structure_name(i.structure)}。",
)
_SINGLE = (
    lambda i: f"{_q(i.char)}是独体字。",
    lambda i: f"{i.char}字不能再拆分，是一个独体字。",
    lambda i: f"从结构上看，{i.char}是独体字。",
    lambda i: f"{_q(i.char)}字为独体结构。",
    lambda i: f"{_q(i.char)}字的字形是独体结构，不能拆成部件。",
)
_ALL_PARTS = (
    lambda i: f"{_q(i.char)}字由{'和'.join(_q(c) for _, c in i.parts)}组成，"
              + "，".join(f"{_q(c)}在{p}" for p, c in i.parts) + "。",
    lambda i: f"{i.char}字" + "，".join(f"{p}是{_q(c)}" for p, c in i.parts) + "。",
    lambda i: f"把{_q(i.char)}拆开，" + "，".join(f"{p}写{_q(c)}" for p, c in i.parts) + "。",
)
# One part at its position, the character and the position before the part (as a reader asks).
_ONE_PART = (
    lambda i, p, c: f"{i.char}字的{p}写作{_q(c)}。",
    lambda i, p, c: f"{_q(i.char)}字的{p}是{_q(c)}。",
    lambda i, p, c: f"{i.char}字{p}写{_q(c)}。",
    lambda i, p, c: f"写{_q(i.char)}字，{p}是{_q(c)}。",
    lambda i, p, c: f"{_q(i.char)}字，{p}为{_q(c)}。",
    lambda i, p, c: f"{_q(i.char)}字{p}的部件是{_q(c)}。",
)
_PART_AT = (
    lambda i, p, c: f"{_q(c)}在{_q(i.char)}字的{p}。",
    lambda i, p, c: f"{c}是{i.char}字的一个部件，位置在{p}。",
)
# A part at its position and not another of the character's parts (the probe's distractor).
_PART_NOT = (
    lambda i, p, c, o: f"{_q(i.char)}字{p}是{_q(c)}，不是{_q(o)}。",
    lambda i, p, c, o: f"{i.char}字的{p}写{_q(c)}，{_q(o)}不在{p}。",
)
_HAS_PART = (
    lambda i, c: f"{_q(i.char)}字含有{_q(c)}。",
    lambda i, c: f"{_q(i.char)}字包含{_q(c)}这个部件。",
)


class FactWriter:
    """Paragraphs of facts, one per character, worded by a seeded random generator."""

    def __init__(self, infos: Sequence[CharInfo], seed: int):
        self.infos = list(infos)
        self.rng = random.Random(seed)
        self._groups: dict[str, dict[object, list[str]]] = {
            kind: {} for kind in _RELATIONS
        }
        for info in self.infos:
            for kind in _RELATIONS:
                key = self._key(kind, info.readings[0])
                if key != "":
                    self._groups[kind].setdefault(key, []).append(info.char)
        for groups in self._groups.values():
            for group in groups.values():
                self.rng.shuffle(group)
        self._partners_named: dict[tuple[str, str], int] = {}  # (kind, char) -> partners named so far

    @staticmethod
    def _key(kind: str, reading: hanzi_lexicon.Reading) -> object:
        """What characters related by `kind` share ("" = nothing to share: a zero initial)."""
        return {"syllable": reading.marked, "final": reading.final, "initial": reading.initial,
                "tone": reading.tone}[kind]

    def _others(self, kind: str, key: object, ch: str, n: int) -> list[str]:
        group = [c for c in self._groups[kind].get(key, ()) if c != ch]
        return self.rng.sample(group, min(n, len(group)))

    def _partners(self, kind: str, key: object, ch: str, n: int) -> list[str]:
        """The next `n` characters after `ch` in its (shuffled) group, going round.

        A character's paragraphs thus name new partners until the group is used up, and the
        paragraphs of the characters before it name it, so every pass adds new pairs.
        """
        group = self._groups[kind][key]
        if len(group) - 1 <= n:
            return [c for c in group if c != ch]
        start = self._partners_named.get((kind, ch), 0)
        self._partners_named[(kind, ch)] = start + n
        at = group.index(ch)
        offsets = [1 + (start + t) % (len(group) - 1) for t in range(n)]
        return [group[(at + offset) % len(group)] for offset in offsets]

    def _stranger(self, kind: str, info: CharInfo) -> str | None:
        """A chosen character that shares `kind` with `info`'s default reading under none of its own."""
        key = self._key(kind, info.readings[0])
        for _ in range(20):
            other = self.rng.choice(self.infos)
            if other.char != info.char and all(self._key(kind, r) != key for r in other.readings):
                return other.char
        return None

    def paragraph(self, info: CharInfo) -> str:
        """All known facts about one character, each in a randomly chosen wording, in random order.

        Per relation (same reading, final, initial, tone) it names up to PAIRS_PER_RELATION
        characters that share it, one pair sentence each, one character that does not, and
        sometimes a list of more; every part of the character is stated at its position, and
        one part is set against another of its parts ("上边是工，不是水").
        """
        pick: Callable = self.rng.choice
        r = info.readings[0]
        sentences = [*(t(info, r) for t in self.rng.sample(_READING, 2)), pick(_SOUNDS)(info, r), pick(_TONE)(info, r)]
        for kind in _RELATIONS:
            key = self._key(kind, r)
            if key == "":
                continue
            others = self._partners(kind, key, info.char, PAIRS_PER_RELATION)
            sentences.extend(pick(_PAIR[kind])(info, r, other) for other in others)
            stranger = self._stranger(kind, info)
            if stranger:
                sentences.append(pick(_NOT_PAIR[kind])(info, r, stranger))
            if others and self.rng.random() < 0.5:
                sentences.append(_GROUP[kind](info, r, self._others(kind, key, info.char, 3)))
        if info.radical:
            sentences.append(pick(_RADICAL)(info))
        if info.structure == "独体":
            sentences.append(pick(_SINGLE)(info))
        elif info.structure:
            sentences.append(pick(_STRUCTURE)(info))
            if info.parts:
                sentences.append(pick(_ALL_PARTS)(info))
                sentences.extend(pick(_ONE_PART)(info, position, component) for position, component in info.parts)
                position, component = pick(info.parts)
                sentences.append(pick(_PART_AT)(info, position, component))
                elsewhere = [c for p, c in info.parts if p != position and c != component]
                if elsewhere:
                    sentences.append(pick(_PART_NOT)(info, position, component, pick(elsewhere)))
                sentences.append(pick(_HAS_PART)(info, pick(info.parts)[1]))
        self.rng.shuffle(sentences)
        return "".join(sentences)

    def documents(self) -> Iterator[str]:
        """Passes over the characters (each pass in a new random order), without end."""
        for _ in range(_MAX_PASSES):
            order = list(self.infos)
            self.rng.shuffle(order)
            for info in order:
                yield self.paragraph(info)
