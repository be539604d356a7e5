"""The workdir's tokenizer follows the config: a new tokenizer replaces the old one, with a line."""
import types

from babylm_jax.corpus import preparation


def test_a_changed_tokenizer_replaces_the_published_one(tmp_path, capsys):
    first, second = tmp_path / "tok_a", tmp_path / "tok_b"
    for directory, text in ((first, "A"), (second, "B")):
        directory.mkdir()
        (directory / "model.txt").write_text(text)
    preparation._publish_tokenizer(first, tmp_path, "key-a", types.SimpleNamespace(kind="bpe", vocab_size=1200))
    assert "replaced" not in capsys.readouterr().out  # nothing was there before
    preparation._publish_tokenizer(second, tmp_path, "key-b", types.SimpleNamespace(kind="char", vocab_size=295))
    assert "replaced by this run's char tokenizer of 295 ids" in capsys.readouterr().out
    published = tmp_path / "tokenizer"
    assert (published / "model.txt").read_text() == "B"
    assert (published / "fingerprint.txt").read_text() == "key-b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok_a", "tok_b", "tokenizer"]  # no leftovers


def test_a_tokenizer_replaced_for_another_corpus_says_so(tmp_path, capsys):
    """The same tokenizer settings over another corpus: the line said "other data.tokenizer or model.vocab_size
    settings" and "set those keys as before", though no key had changed."""
    first, second = tmp_path / "data" / "corpus-a" / "tokenizer-a", tmp_path / "data" / "corpus-b" / "tokenizer-b"
    for directory in (first, second):
        directory.mkdir(parents=True)
    preparation._publish_tokenizer(first, tmp_path, "key-a", types.SimpleNamespace(kind="char", vocab_size=300))
    (tmp_path / "data" / "prepared.json").write_text('{"corpus": "corpus-a"}')
    preparation._publish_tokenizer(second, tmp_path, "key-b", types.SimpleNamespace(kind="char", vocab_size=310))
    line = capsys.readouterr().out.strip()
    assert "prepared from other corpus files or data.* reading settings (data/corpus-a, now data/corpus-b)" in line
    assert line.endswith("(give data.corpus, data.paths and those settings as before to keep the old one)")
    assert "data.tokenizer" not in line
