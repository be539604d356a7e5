"""The workdir's tokenizer follows the config: a new tokenizer replaces the old one."""
from babylm_jax.corpus.tokens import preparation


def test_a_changed_tokenizer_replaces_the_published_one(tmp_path):
    first, second = tmp_path / "tok_a", tmp_path / "tok_b"
    for directory, text in ((first, "A"), (second, "B")):
        directory.mkdir()
        (directory / "model.txt").write_text(text)
    preparation._publish_tokenizer(first, tmp_path, "key-a")
    preparation._publish_tokenizer(second, tmp_path, "key-b")
    published = tmp_path / "tokenizer"
    assert (published / "model.txt").read_text() == "B"
    assert (published / "fingerprint.txt").read_text() == "key-b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok_a", "tok_b", "tokenizer"]  # no leftovers
