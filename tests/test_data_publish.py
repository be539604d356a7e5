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
