"""jieba 0.42.1's default-mode `cut`, exactly, several times faster: the rule stays jieba's.

`jieba.cut(text)` splits the text into blocks with jieba's own regular expressions and cuts each
block on its own (`__cut_DAG`): the best route through the dictionary's word graph, then every run of
single characters that is not itself a dictionary word goes through jieba's HMM (`finalseg.cut`).
This module keeps that structure and jieba's rules, with one part from elsewhere: the route of a block
of CJK characters only (U+4E00-U+9FD5) comes from rjieba (jieba-rs, the same dictionary and the same
route rule) with its HMM off; blocks with letters, digits or `+#&._%-` take jieba's own route
(`get_DAG`, `calc`). Runs of single characters follow jieba's condition (a run that is in the
dictionary with a nonzero count is kept as characters, where jieba-rs would run its HMM) and jieba's
HMM, its four states unrolled here with jieba's arithmetic and ties (`JiebaHMM`).

Block and run results are remembered (both are pure functions of their text), in bounded tables.
Where rjieba is not installed, or `data.word_counter="jieba"`, `jieba.cut` itself is used. The counting stage checks
a sample of every shard against `jieba.cut` (corpus_cache.py); tests/test_segmenter.py compares the two on
edge cases, random mixed texts and built-in documents, experiments/benchmarks/word_count_speed.py on
every document of our corpora.
"""
from __future__ import annotations

import re
from typing import Callable

from babylm_jax.corpus.words import init_jieba

_CJK_ONLY = re.compile("[\u4E00-\u9FD5]+")
_MEMO_ENTRIES = 1 << 19  # per table; a table that fills is emptied (results never change, only speed)


def _jieba():
    """The jieba module, its dictionary loaded (once per process, quietly)."""
    import jieba

    init_jieba()
    return jieba


class SegmenterLoadError(ImportError):
    """rjieba is installed but fails to load; the message names it, the error and the ways on."""


def load_rjieba():
    """The rjieba module, or None where it is not installed; SegmenterLoadError where it is there but
    fails to load (a broken build, a missing shared library: any error, said as what it is)."""
    try:
        import rjieba
    except ModuleNotFoundError as error:
        if error.name == "rjieba":
            return None
        broken = error
    except Exception as error:  # noqa: BLE001 - a broken install raises anything
        broken = error
    else:
        return rjieba
    text = " ".join(str(broken).split())
    raise SegmenterLoadError(
        f"loading rjieba failed ({type(broken).__name__}: {text}); rjieba only speeds up the word count (the words "
        "stay jieba.cut's): reinstall it (pip install --force-reinstall rjieba) or uninstall it "
        "(pip uninstall rjieba; jieba.cut then counts, slower)") from broken


class FastJieba:
    """`segment(text) == list(jieba.cut(text))` for jieba 0.42.1 in its default mode (HMM on);
    `lengths(text)` gives the lengths of those words (what the count and the word starts need)."""

    def __init__(self):
        rjieba = load_rjieba()
        if rjieba is None:
            raise ModuleNotFoundError("FastJieba needs rjieba: pip install rjieba", name="rjieba")
        jieba = _jieba()
        self._route = rjieba.cut
        self._hmm = JiebaHMM()
        self._tokenizer = jieba.dt
        self._freq = jieba.dt.FREQ
        self._blocks = jieba.re_han_default
        self._skip = jieba.re_skip_default
        self._block_memo: dict[str, bytes | tuple[int, ...]] = {}
        self._run_memo: dict[str, bytes | tuple[int, ...]] = {}

    def segment(self, text: str) -> list[str]:
        words, start = [], 0
        for length in self.lengths(text):
            words.append(text[start:start + length])
            start += length
        return words

    def lengths(self, text: str) -> list[int]:
        """The length of each word of `jieba.cut(text)`, in order (they add up to `len(text)`)."""
        lengths: list[int] = []
        for i, piece in enumerate(self._blocks.split(text)):  # a split on one group: matches at odd places
            if i % 2:
                lengths += self._block_lengths(piece)
                continue
            for j, part in enumerate(self._skip.split(piece)):  # odd: "\r\n" or one space; even: one word a character
                if j % 2:
                    lengths.append(len(part))
                else:
                    lengths += [1] * len(part)
        return lengths

    def _block_lengths(self, block: str) -> bytes | tuple[int, ...]:
        lengths = self._block_memo.get(block)
        if lengths is None:
            route = self._route(block, False) if _CJK_ONLY.fullmatch(block) else self._jieba_route(block)
            lengths = _remember(self._block_memo, block, self._lengths_from_route(route))
        return lengths

    def _jieba_route(self, block: str) -> list[str]:
        """jieba's own best route through the word graph (`get_DAG`, `calc`), as its steps' words."""
        route: dict = {}
        self._tokenizer.calc(block, self._tokenizer.get_DAG(block), route)
        steps, x = [], 0
        while x < len(block):
            y = route[x][1] + 1
            steps.append(block[x:y])
            x = y
        return steps

    def _lengths_from_route(self, route: list[str]) -> list[int]:
        """jieba's `__cut_DAG` after the route: runs of single-character steps go to `_single_run`."""
        lengths: list[int] = []
        run = ""
        for word in route:
            if len(word) == 1:
                run += word
                continue
            if run:
                lengths += self._single_run(run)
                run = ""
            lengths.append(len(word))
        if run:
            lengths += self._single_run(run)
        return lengths

    def _single_run(self, run: str) -> bytes | tuple[int, ...] | list[int]:
        """jieba's rule for a run of single-character route steps."""
        if len(run) == 1 or self._freq.get(run):
            return [1] * len(run)
        lengths = self._run_memo.get(run)
        if lengths is None:
            lengths = _remember(self._run_memo, run, [len(word) for word in self._hmm.cut_run(run)])
        return lengths


class JiebaHMM:
    """`list(jieba.finalseg.cut(run))` for a run of CJK characters, with jieba's arithmetic in jieba's
    order and its ties (`max` over (probability, state) pairs), its four states unrolled."""

    def __init__(self):
        from jieba import finalseg

        start, trans, emit = finalseg.start_P, finalseg.trans_P, finalseg.emit_P
        self._start = start["B"], start["M"], start["E"], start["S"]
        self._emit = emit["B"], emit["M"], emit["E"], emit["S"]
        self._trans = (trans["E"]["B"], trans["S"]["B"], trans["M"]["M"], trans["B"]["M"],
                       trans["B"]["E"], trans["M"]["E"], trans["S"]["S"], trans["E"]["S"])
        self._min = finalseg.MIN_FLOAT
        self._cjk, self._skip = finalseg.re_han, finalseg.re_skip
        if finalseg.Force_Split_Words:
            raise ValueError("jieba's HMM has forced splits (jieba.suggest_freq/del_word): count with jieba itself")

    def states(self, run: str) -> list[str]:
        """The most likely B/M/E/S state of each character (jieba's `viterbi`)."""
        low = self._min
        e_b, e_m, e_e, e_s = self._emit
        t_eb, t_sb, t_mm, t_bm, t_be, t_me, t_ss, t_es = self._trans
        first = run[0]
        v_b, v_m, v_e, v_s = (p + e.get(first, low) for p, e in zip(self._start, self._emit))
        back = []
        for char in run[1:]:
            em = e_b.get(char, low)
            from_e, from_s = v_e + t_eb + em, v_s + t_sb + em
            b, b_from = (from_e, "E") if from_e > from_s else (from_s, "S")
            em = e_m.get(char, low)
            from_m, from_b = v_m + t_mm + em, v_b + t_bm + em
            m, m_from = (from_b, "B") if from_b > from_m else (from_m, "M")
            em = e_e.get(char, low)
            from_b, from_m = v_b + t_be + em, v_m + t_me + em
            e, e_from = (from_b, "B") if from_b > from_m else (from_m, "M")
            em = e_s.get(char, low)
            from_s, from_e = v_s + t_ss + em, v_e + t_es + em
            s, s_from = (from_e, "E") if from_e > from_s else (from_s, "S")
            back.append({"B": b_from, "M": m_from, "E": e_from, "S": s_from})
            v_b, v_m, v_e, v_s = b, m, e, s
        state = "E" if v_e > v_s else "S"
        states = [state]
        for pointers in reversed(back):
            state = pointers[state]
            states.append(state)
        return states[::-1]

    def cut_run(self, run: str) -> list[str]:
        """jieba's `finalseg.cut`: CJK stretches through the HMM, letters and digits as they come."""
        words: list[str] = []
        for block in self._cjk.split(run):
            if self._cjk.match(block):
                words += self.cut(block)
            else:
                words += (piece for piece in self._skip.split(block) if piece)
        return words

    def cut(self, run: str) -> list[str]:
        """jieba's `finalseg.__cut`: words from the states (a trailing B/M run is one word)."""
        words, begin, end = [], 0, 0
        for i, state in enumerate(self.states(run)):
            if state == "B":
                begin = i
            elif state == "E":
                words.append(run[begin:i + 1])
                end = i + 1
            elif state == "S":
                words.append(run[i])
                end = i + 1
        if end < len(run):
            words.append(run[end:])
        return words


def _remember(table: dict, key: str, lengths: list[int]) -> bytes | tuple[int, ...]:
    """Stores `lengths` compactly (bytes where every length is under 256) under `key`; returns them."""
    stored = bytes(lengths) if max(lengths) < 256 else tuple(lengths)
    if len(table) >= _MEMO_ENTRIES:
        table.clear()
    table[key] = stored
    return stored


def make_word_lengths(use_port: bool) -> tuple[Callable[[str], list[int]], str]:
    """(text -> the lengths of the words of `list(jieba.cut(text))`, its name): the faster exact
    segmenter where `use_port` and rjieba is installed, else jieba itself."""
    if use_port and load_rjieba() is not None:
        return FastJieba().lengths, "jieba 0.42.1's rule, CJK routes by rjieba"
    jieba = _jieba()
    return (lambda text: [len(word) for word in jieba.cut(text)]), "jieba.cut"
