"""Hanzi facts: true statements, sized in jieba words, reproducible, a corpus source like any other."""
import json
import re

import pytest

from babylm_jax.config.schema import RunConfig
from babylm_jax.tools import hanzi_facts
from babylm_jax.corpus import hanzi_fact_writer
from babylm_jax.corpus import hanzi_lexicon
from babylm_jax.tasks import leakage
from babylm_jax.corpus import preparation
from babylm_jax.corpus import words  # noqa: E402
from babylm_jax.config.data import DataConfig  # noqa: E402
from fixtures.cli import user_error  # noqa: E402
from fixtures.data import synthetic  # noqa: E402


@pytest.fixture(scope="module")
def lexicon():
    return hanzi_lexicon.Lexicon()


def test_lexicon_knows_readings_radicals_and_parts(lexicon):
    ban = lexicon.info("伴")
    assert ban.readings[0] == hanzi_lexicon.Reading("bàn", "b", "an", 4)
    assert (ban.radical, ban.structure, ban.parts) == ("亻", "左右", (("左边", "亻"), ("右边", "半")))
    assert lexicon.info("汞").parts == (("上边", "工"), ("下边", "水"))
    assert lexicon.info("国").structure == "全包围"
    assert lexicon.info("街").structure == "左中右"  # CHISE writes ⿴行圭
    assert [lexicon.info(c).structure for c in "二下人"] == ["独体"] * 3  # stroke splits are 独体
    assert lexicon.info("绿").readings[0].final == "ü" and lexicon.info("爱").readings[0].initial == ""
    assert lexicon.info("a") is None and lexicon.info("。") is None


def test_character_selection_and_bad_input(lexicon, tmp_path):
    infos = hanzi_facts.select_characters(lexicon, "20", None)
    assert len(infos) == 20 and infos[0].char == "一"
    listed = tmp_path / "chars.txt"
    listed.write_text("汞 伴\nabc伴", encoding="utf-8")
    assert [i.char for i in hanzi_facts.select_characters(lexicon, str(listed), None)] == ["汞", "伴"]
    listed.write_text("\ufeff汞伴", encoding="utf-8")  # a file saved with a byte-order mark (Windows Notepad)
    assert [i.char for i in hanzi_facts.select_characters(lexicon, str(listed), None)] == ["汞", "伴"]
    listed.write_text("汞伴", encoding="gbk")
    with pytest.raises(hanzi_facts.FactsError, match=rf"--characters {re.escape(str(listed))}: not UTF-8 text "
                                                     r"\(byte 0: invalid start byte\); save it as UTF-8"):
        hanzi_facts.select_characters(lexicon, str(listed), None)
    with pytest.raises(hanzi_facts.FactsError, match="--characters: 'abc' is neither"):
        hanzi_facts.select_characters(lexicon, "abc", None)
    with pytest.raises(hanzi_facts.FactsError, match="--from_workdir: .* no prepared corpus"):
        hanzi_facts.select_characters(lexicon, None, str(tmp_path))
    with pytest.raises(hanzi_facts.FactsError, match="--share must be in"):
        hanzi_facts.target_words(None, 1.5, 1000)
    with pytest.raises(hanzi_facts.FactsError, match="--words must be in"):
        hanzi_facts.target_words(2000, None, 1000)
    assert hanzi_facts.target_words(None, 0.25, 1000) == 250


def test_missing_package_names_the_install(monkeypatch):
    real = hanzi_lexicon.importlib.import_module

    def fake(name):
        if name == "pypinyin":
            raise ImportError("no pypinyin")
        return real(name)

    monkeypatch.setattr(hanzi_lexicon.importlib, "import_module", fake)
    with pytest.raises(hanzi_lexicon.MissingPackageError, match=r"'pypinyin', which babylm_jax installs: pip install -e \."):
        hanzi_lexicon.Lexicon()


def _texts(directory):
    return [json.loads(line)["text"] for line in (directory / hanzi_facts.OUTPUT_FILE).read_text().splitlines()]


def test_sized_in_jieba_words_reproducible_and_true(lexicon, tmp_path):
    infos = hanzi_facts.select_characters(lexicon, "60", None)
    manifest = hanzi_facts.write_facts(tmp_path / "a", infos, 20_000, seed=3, settings={})
    texts = _texts(tmp_path / "a")
    counted = sum(len(words.jieba_words(t)) for t in texts)  # the slow, obvious count
    assert manifest["words"] == counted <= 20_000 and counted > 20_000 - 600 and manifest["documents"] == len(texts)
    assert manifest["passes"] > 1  # more than one pass over 60 characters
    hanzi_facts.write_facts(tmp_path / "b", infos, 20_000, seed=3, settings={})
    hanzi_facts.write_facts(tmp_path / "c", infos, 20_000, seed=4, settings={})
    assert _texts(tmp_path / "b") == texts and _texts(tmp_path / "c") != texts
    stated = re.findall(r"(\w)字读作([a-zü\u00e0-\u01dc]+)。", "".join(texts))
    assert len(stated) > 10
    assert all(lexicon.info(ch).readings[0].marked == syllable for ch, syllable in stated)
    parts = re.findall(r"“(\w)”在“(\w)”字的(\w\w)。", "".join(texts))
    assert parts and all((position, part) in lexicon.info(ch).parts for part, ch, position in parts)


def test_nothing_half_written(lexicon, tmp_path, monkeypatch):
    infos = hanzi_facts.select_characters(lexicon, "5", None)
    calls = []
    paragraph = hanzi_fact_writer.FactWriter.paragraph

    def failing(writer, info):
        calls.append(info)
        if len(calls) > 3:
            raise RuntimeError("interrupted")
        return paragraph(writer, info)

    monkeypatch.setattr(hanzi_fact_writer.FactWriter, "paragraph", failing)
    with pytest.raises(RuntimeError):
        hanzi_facts.write_facts(tmp_path / "out", infos, None, seed=0, settings={})
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(hanzi_facts.FactsError, match="--out .* not a hanzi facts directory"):
        hanzi_facts.write_facts(tmp_path / "other", infos, None, seed=0, settings={})


def test_cli_writes_one_pass(tmp_path, capsys):
    hanzi_facts.main(["hanzi_facts", "--out", str(tmp_path / "f"), "--characters", "8", "--seed", "1"])
    manifest = json.loads((tmp_path / "f" / hanzi_facts.MANIFEST).read_text())
    assert manifest["documents"] == manifest["characters"] == 8 and manifest["settings"]["seed"] == 1
    assert "--share must be in (0, 1]" in user_error(capsys, hanzi_facts, ["hanzi_facts", "--out", str(tmp_path / "g"),
                                                                           "--share", "2"])
    assert not (tmp_path / "g").exists()
    assert "At most one of (words, share)" in user_error(capsys, hanzi_facts, ["hanzi_facts", f"--out={tmp_path / 'h'}",
                                                                    "--words=5", "--share=0.1"])


def test_facts_are_a_counted_and_checked_corpus_source(lexicon, tmp_path):
    facts = tmp_path / "facts"
    infos = hanzi_facts.select_characters(lexicon, "30", None)
    manifest = hanzi_facts.write_facts(facts, infos, None, seed=0, settings={})
    config = synthetic.tiny_config(synthetic.write_txt_corpus(tmp_path / "corpus", 40))
    config.data.paths = (str(facts),)
    config.data.tokenizer.kind, config.model.vocab_size = "char", 1000
    config.data.tokenizer.required_characters, config.data.tokenizer.min_char_count = "corpus_cjk", 1000
    prepared = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "w")
    sources = prepared.budget_report["sources"]
    assert sources[str(facts)]["words"] == manifest["words"] and sources[str(facts)]["documents"] == 30
    assert prepared.budget_report["words"] == manifest["words"] + sources[str(config.data.corpus)]["words"]
    hanzi = {c for text in prepared.corpus.iter_texts() for c in text if hanzi_lexicon.is_cjk_basic(c)}
    tokenizer = prepared.tokenizer  # every hanzi is one piece, though none occurs data.tokenizer.min_char_count times
    assert len(hanzi) > 150 and all([tokenizer.id_to_piece(i) for i in tokenizer.encode(c)] == [c] for c in hanzi)
    # The leakage check reads them: an evaluation item copied from the facts is found.
    sentence = re.split(r"(?<=。)", _texts(facts)[0])[0]
    (tmp_path / "eval" / "hanzi_structure").mkdir(parents=True)
    (tmp_path / "eval" / "hanzi_structure" / "probe.jsonl").write_text(json.dumps(
        {"sentence_good": sentence, "sentence_bad": "无关的句子。", "UID": "u", "phenomenon": "p"},
        ensure_ascii=False) + "\n", encoding="utf-8")
    detector = leakage.LeakDetector.from_data_dir(tmp_path / "eval", 13, DataConfig.from_config(config.data).normalize)
    report = detector.report(prepared.corpus.iter_texts())
    assert report["tasks"]["hanzi_structure"]["leaked"] == 1


def test_probe_wording_never_occurs_in_the_facts(lexicon, tmp_path):
    from fixtures.scripts import ROOT, load_script

    probe_dir = ROOT / "experiments" / "hanzi_probe"
    make_probe = load_script("experiments/hanzi_probe/make_probe.py")
    rows = [json.loads(line) for path in sorted(probe_dir.glob("hanzi_*/*.jsonl")) for line in path.read_text().splitlines()]
    assert len(rows) >= 400 and all(any(m in r["sentence_good"] for m in make_probe.PROBE_MARKERS) for r in rows)
    infos = hanzi_facts.select_characters(lexicon, "300", None)
    hanzi_facts.write_facts(tmp_path / "f", infos, 60_000, seed=0, settings={})
    text = "".join(_texts(tmp_path / "f"))
    assert not [m for m in make_probe.PROBE_MARKERS if m in text]
    # nor any 13 characters in a row of a probe sentence (the leakage check's n-gram length)
    grams = {text[i:i + 13] for i in range(len(text) - 12)}
    shared = [s[i:i + 13] for r in rows for s in (r["sentence_good"], r["sentence_bad"])
              for i in range(len(s) - 12) if s[i:i + 13] in grams]
    assert not shared, shared[:5]


def _pair_relation(sentence):
    """The relation a pair sentence (“A”…“B”… at its start) states, read from its wording."""
    if "同音" in sentence or "读音" in sentence:
        return "syllable"
    if "声母" in sentence or "开头" in sentence:
        return "initial"
    if "韵" in sentence:
        return "final"
    if "声" in sentence or any(name in sentence for name in hanzi_lexicon.TONE_NAMES.values()):
        return "tone"
    return None


_RELATION_KEYS = {"syllable": lambda r: r.marked, "initial": lambda r: r.initial, "final": lambda r: r.final,
                  "tone": lambda r: r.tone}


def test_pair_facts_are_true_many_and_varied(lexicon, tmp_path):
    infos = hanzi_facts.select_characters(lexicon, "200", None)
    hanzi_facts.write_facts(tmp_path / "f", infos, None, seed=0, settings={})  # one pass
    sentences = [s for t in _texts(tmp_path / "f") for s in re.findall(r"[^。]*。", t)]
    pairs = {kind: set() for kind in ("syllable", "initial", "final", "tone")}
    wordings = {kind: set() for kind in pairs}
    denied = dict.fromkeys(pairs, 0)
    assert not [s for s in sentences if "押韵" in s or "同韵" in s]  # a written final is not a rhyme
    for sentence in sentences:
        m = re.match(r"“(\w)”(?:和|与|跟)?“(\w)”(.*)", sentence)
        if not m:
            continue
        a, b = (lexicon.info(c).readings[0] for c in m.group(1, 2))
        kind = _pair_relation(m.group(3))
        assert kind, sentence
        if "不" in m.group(3):  # a denial: the other character shares it under none of its readings
            key = _RELATION_KEYS[kind]
            assert all(key(a) != key(r) for r in lexicon.info(m.group(2)).readings), sentence
            denied[kind] += 1
            continue
        same = {"syllable": a.marked == b.marked, "initial": a.initial == b.initial != "",
                "final": a.final == b.final, "tone": a.tone == b.tone}[kind]
        assert same, sentence
        assert {"syllable": a.marked, "initial": a.initial, "final": a.final}.get(kind, "") in m.group(3)
        pairs[kind].add(frozenset(m.group(1, 2)))
        wordings[kind].add(re.sub(r"[a-zü\u00e0-\u01dc]+|第.声|\w(?=”)", "", m.group(0)))
    # Several partners per character and relation in one pass (one pair sentence each): more than
    # 1.5 times the pairs one partner per character could give; homophones only where the 200 have them.
    assert all(len(pairs[kind]) > 1.5 * len(infos) for kind in ("tone", "final", "initial")), pairs
    assert len(pairs["syllable"]) > 20
    assert all(len(w) >= 3 for w in wordings.values()), wordings
    assert all(n > 0.9 * len(infos) for kind, n in denied.items() if kind != "initial"), denied


def test_every_part_is_stated_at_its_position(lexicon, tmp_path):
    infos = [i for i in hanzi_facts.select_characters(lexicon, "200", None) if len(i.parts) >= 2]
    writer = hanzi_fact_writer.FactWriter(infos, seed=1)
    for info in infos[:30]:
        text = writer.paragraph(info)
        for position, part in info.parts:  # the character, then the position, then the part
            assert re.search(f"{info.char}”?字[^。“]*{position}[^。“]*“{part}”", text), (info, text)
        stated = re.findall(f"{info.char}”?字[，的]?(左边|右边|上边|下边|中间|外边|里边)(?:写作|是|写|为|的部件是)“(\\w)”", text)
        assert stated and all(p in info.parts for p in stated), text
        for position, part, other in re.findall(
                f"{info.char}”?字的?(左边|右边|上边|下边|中间|外边|里边)写?是?“(\\w)”，(?:不是)?“(\\w)”", text):
            assert (position, part) in info.parts and (position, other) not in info.parts, text


def test_each_paragraph_names_new_partners(lexicon):
    infos = hanzi_facts.select_characters(lexicon, "300", None)
    writer = hanzi_fact_writer.FactWriter(infos, seed=2)
    info = next(i for i in infos if 13 <= sum(j.readings[0].final == i.readings[0].final for j in infos) <= 40)
    group = [j.char for j in infos if j.readings[0].final == info.readings[0].final and j.char != info.char]
    paragraphs = len(group) // hanzi_fact_writer.PAIRS_PER_RELATION
    named = []
    for _ in range(paragraphs):
        for sentence in re.findall(r"[^。]*。", writer.paragraph(info)):
            m = re.match(f"“{info.char}”(?:和|与|跟)?“(\\w)”(.*)", sentence)
            if m and _pair_relation(m.group(2)) == "final" and "不" not in m.group(2):
                named.append(m.group(1))
    # three partners a paragraph, none named twice until the whole group has been named
    assert len(named) == paragraphs * hanzi_fact_writer.PAIRS_PER_RELATION and len(set(named)) == len(named), named
    assert set(named) <= set(group)
