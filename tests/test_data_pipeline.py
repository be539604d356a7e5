"""Prepare (budget, token cache, resume) and the packed batch pipeline."""
import json
import shutil
import sys

import numpy as np
import pytest

from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import budget
from babylm_jax.corpus import sources as corpus
from babylm_jax.corpus import packing
from babylm_jax.corpus import pipeline
from babylm_jax.corpus import preparation
from babylm_jax.corpus import token_cache
from babylm_jax.corpus import words
from fixtures.data import synthetic


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return synthetic.write_txt_corpus(tmp_path_factory.mktemp("corpus"), 120)


@pytest.fixture(scope="module")
def prepared(corpus_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("work")
    config = synthetic.tiny_config(corpus_dir, tokenizer="bpe", whole_word_masking=True)
    return config, workdir, pipeline.build_train_data(RunConfig.from_config(config), workdir)


def test_budget_equals_direct_jieba_count(prepared, corpus_dir):
    _, workdir, data = prepared
    docs = synthetic.documents(120)
    report = json.loads((workdir / "budget.json").read_text())
    assert report["words"] == sum(len(list(__import__("jieba").cut(d))) for d in docs)
    assert report["documents"] == 120 and report["characters"] == sum(map(len, docs))
    assert report["sources"][str(corpus_dir)]["words"] == report["words"]
    assert data.stats["train"]["words"] + data.stats["eval"]["words"] == report["words"]


def test_words_raw_is_the_official_rule_on_documents_as_read(tmp_path):
    import jieba

    from babylm_jax.corpus import corpus_cache
    from babylm_jax.config.data import DataConfig

    raw = ["小猫在  睡觉。\n\n  它很累。 ", "   ", "今天天气很好", "他说：  “好的”\t"]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.jsonl").write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in raw),
                                                    encoding="utf-8")
    config = synthetic.tiny_config(tmp_path / "corpus")
    data_config = DataConfig.from_config(config.data)
    cache = corpus_cache.count_corpus(data_config, tmp_path / "data")
    report = budget.budget_report(cache, word_budget=1000, allow_over_budget=False)
    kept = [data_config.normalize(t) for t in raw]
    assert report["words_raw"] == sum(len(list(jieba.cut(t))) for t in raw)  # spaces, tabs, empty lines count
    assert report["words"] == sum(len(list(jieba.cut(t))) for t in kept if t.strip())
    assert report["words_raw"] > report["words"] and report["budget_words"] == report["words_raw"]
    assert report["sources"][str(tmp_path / "corpus")]["words_raw"] == report["words_raw"]
    for shard in cache.shard_dirs:  # a cache counted before words_raw existed gets it added, same key
        (shard / "raw_words.json").unlink()
    again = corpus_cache.count_corpus(data_config, tmp_path / "data")
    assert again.root == cache.root and again.raw_words() == cache.raw_words() == {0: report["words_raw"]}
    assert "00000/raw_words.json" in json.loads((cache.root / "index.json").read_text())["files"]  # checksummed again
    between = budget.budget_report(cache, word_budget=report["words"], allow_over_budget=False)
    with pytest.raises(budget.BudgetError, match=rf"as read: {report['words_raw']:,}; as trained on: {report['words']:,}"):
        budget.enforce_budget(between, tmp_path / "budget.json")  # the larger count is the one enforced


def test_counted_corpus_reports_its_budget_without_jieba(tmp_path, monkeypatch):
    """A prepared workdir's budget comes from its counted shards: train on a machine without jieba
    (the H200 image: experiments/benchmarks/h200_check.sh) reports the same counts."""
    from babylm_jax.corpus import corpus_cache
    from babylm_jax.config.data import DataConfig

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.jsonl").write_text('{"text": "小猫在睡觉。"}\n{"text": "今天天气很好"}\n', encoding="utf-8")
    data_config = DataConfig.from_config(synthetic.tiny_config(tmp_path / "corpus").data)
    counted = budget.budget_report(corpus_cache.count_corpus(data_config, tmp_path / "data"), 1000, False)
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba now raises ImportError
    again = budget.budget_report(corpus_cache.count_corpus(data_config, tmp_path / "data"), 1000, False)
    assert "not installed" in again.pop("counter") and counted.pop("counter").endswith("0.42.1")
    assert again == counted


def test_over_budget_refused(corpus_dir, tmp_path):
    config = synthetic.tiny_config(corpus_dir, word_budget=100)
    with pytest.raises(budget.BudgetError, match="over data.word_budget=100"):
        preparation.prepare_corpus(RunConfig.from_config(config), tmp_path)
    assert json.loads((tmp_path / "budget.json").read_text())["over_budget"]
    config.data.allow_over_budget = True
    preparation.prepare_corpus(RunConfig.from_config(config), tmp_path)
    assert json.loads((tmp_path / "budget.json").read_text())["allowed_over_budget"]


def test_missing_and_empty_corpus(tmp_path):
    with pytest.raises(corpus.CorpusError, match="does not exist"):
        pipeline.build_train_data(RunConfig.from_config(synthetic.tiny_config(tmp_path / "nope")), tmp_path / "w")
    (tmp_path / "blank.txt").write_text("  \n\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match="Empty corpus"):
        pipeline.build_train_data(RunConfig.from_config(synthetic.tiny_config(tmp_path / "blank.txt", txt_documents="line")), tmp_path / "w")
    assert not list((tmp_path / "w" / "data").glob("*/index.json"))


def test_a_batch_larger_than_the_corpus_is_refused_before_any_batch_is_built(tmp_path):
    """train.batch_size=10**9 filled the host's memory (killed by the OOM killer) building its first batches."""
    (tmp_path / "small.txt").write_text("\n\n".join(synthetic.svo_documents(20)) + "\n", encoding="utf-8")
    config = synthetic.tiny_config(tmp_path)
    config.train.batch_size = 10**9
    with pytest.raises(ValueError, match=r"train.batch_size=1,000,000,000 is more rows than the training corpus holds "
                                         r"\(\d+ rows of train.seq_len=32 tokens\)"):
        pipeline.build_train_data(RunConfig.from_config(config), tmp_path / "w")


def _documents_of(tokens):
    return [np.asarray(tokens.tokens[a:b]) for a, b in zip(tokens.doc_offsets[:-1], tokens.doc_offsets[1:])]


def _check_rows(batch, docs, seq_len):
    """Every segment is a contiguous slice of one document (so attention never mixes documents)."""
    for row in range(batch["tokens"].shape[0]):
        seg = batch["segment_ids"][row]
        assert np.all(np.diff(seg[seg > 0]) >= 0)
        for s in np.unique(seg[seg > 0]):
            where = np.flatnonzero(seg == s)
            assert np.array_equal(where, np.arange(where[0], where[-1] + 1))
            assert np.array_equal(batch["positions"][row, where], np.arange(len(where)))
            piece = batch["tokens"][row, where]
            assert any(
                len(d) >= len(piece) and any(np.array_equal(d[i : i + len(piece)], piece) for i in range(len(d) - len(piece) + 1))
                for d in docs
            )
        assert np.all(batch["tokens"][row, seg == 0] == 0)


def test_batches_pack_documents_without_mixing(prepared):
    config, _, data = prepared
    prep = preparation.prepare_corpus(RunConfig.from_config(config), prepared[1])
    docs = _documents_of(prep.tokens)
    batch, batch_size = next(data.train_iterator), config.train.batch_size
    assert batch["tokens"].shape == (batch_size, 32) and batch["tokens"].dtype == np.int32
    assert batch["words"].shape == (batch_size,) and batch["words"].dtype == np.float32
    assert set(batch) == {"tokens", "segment_ids", "positions", "words", "word_starts", "batch_words"}
    _check_rows(batch, docs, 32)
    for eval_batch in data.eval_batches:
        _check_rows(eval_batch, docs, 32)
    # Eval rows past the end of the layout are padding (segment 0 throughout); real rows hold pieces.
    eval_rows = sum(int((b["segment_ids"].max(axis=1) > 0).sum()) for b in data.eval_batches)
    last = data.eval_batches[-1]["segment_ids"]
    num_real = eval_rows - batch_size * (len(data.eval_batches) - 1)
    assert 1 <= num_real <= batch_size
    assert np.all(last[num_real:] == 0)
    assert np.all(last[:num_real].max(axis=1) > 0)


@pytest.mark.parametrize("kind", ["concat", "first_fit"])
def test_layout_covers_documents_and_words(prepared, kind):
    config, workdir, _ = prepared
    tokens = preparation.prepare_corpus(RunConfig.from_config(config), workdir).tokens
    doc_ids = np.arange(tokens.num_documents)
    layout = packing.make_layout(tokens, doc_ids, 32, kind, keep_partial=True)
    builder = packing.BatchBuilder(tokens, layout, whole_word_masking=False)
    batch = builder(np.arange(layout.num_rows))
    _check_rows(batch, _documents_of(tokens), 32)
    # All tokens of all documents appear exactly once, and words add up.
    assert int((batch["segment_ids"] > 0).sum()) == int(tokens.doc_offsets[-1])
    np.testing.assert_allclose(batch["words"].sum(), tokens.doc_words.sum(), rtol=1e-5)
    np.testing.assert_array_equal(builder.all_row_words(), batch["words"])
    rows = np.random.default_rng(0).permutation(layout.num_rows)[:5]
    np.testing.assert_array_equal(builder.all_row_words()[rows], builder(rows)["words"])
    if kind == "first_fit":
        assert layout.num_rows <= -(-int(tokens.doc_offsets[-1]) // 32) * 2


def test_sorted_union_equals_union1d():
    rng = np.random.default_rng(0)
    for n, m in [(0, 0), (0, 5), (7, 0), (1000, 300), (50, 50)]:
        a, b = np.sort(rng.integers(0, 500, n)), np.sort(rng.integers(0, 500, m))
        a = np.unique(a)  # document starts are distinct; row starts are too
        b = np.unique(b)
        np.testing.assert_array_equal(packing._sorted_union(a, b), np.union1d(a, b))


def test_word_starts_match_jieba(prepared):
    config, workdir, data = prepared
    prep = preparation.prepare_corpus(RunConfig.from_config(config), workdir)
    text = next(prep.corpus.iter_texts())
    ids, offsets = prep.tokenizer.encode_with_offsets(text)
    word_begins = set(np.flatnonzero(words.word_start_mask(words.jieba_words(text))).tolist())
    expected = [1] + [int(s in word_begins) for s, _ in offsets] + [1]
    a, b = prep.tokens.doc_offsets[:2]
    assert np.asarray(prep.tokens.word_starts[a:b]).tolist() == expected
    assert np.asarray(prep.tokens.tokens[a:b]).tolist() == [2] + ids + [3]


def test_processes_split_the_global_batch_and_state_resumes(prepared):
    config, workdir, data = prepared
    whole = pipeline.build_train_data(RunConfig.from_config(config), workdir)
    parts = [pipeline.build_train_data(RunConfig.from_config(config), workdir, process_index=p, process_count=2) for p in range(2)]
    for _ in range(3):
        full = next(whole.train_iterator)
        split = [next(p.train_iterator) for p in parts]
        for key in set(full) - {"batch_words"}:
            np.testing.assert_array_equal(np.concatenate([s[key] for s in split]), full[key])
        # Each process counts the words of the whole global batch, exactly as one process does.
        assert full["batch_words"] == np.sum(full["words"])
        assert [s["batch_words"] for s in split] == [full["batch_words"]] * 2
    state = whole.train_iterator.get_state()
    expected = [next(whole.train_iterator)["tokens"] for _ in range(2)]
    fresh = pipeline.build_train_data(RunConfig.from_config(config), workdir)
    fresh.train_iterator.set_state(state)
    for tokens in expected:
        np.testing.assert_array_equal(next(fresh.train_iterator)["tokens"], tokens)
    with pytest.raises(ValueError, match="not divisible"):
        pipeline.build_train_data(RunConfig.from_config(config), workdir, process_index=0, process_count=3)


@pytest.mark.slow
def test_resumed_prepare_equals_uninterrupted(corpus_dir, tmp_path, monkeypatch):
    config = synthetic.tiny_config(corpus_dir, tokenizer="bpe", shard_chars=800)
    config.data.num_workers = 2  # the worker-pool path, once
    reference = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "ref")
    # Interrupt the tokenisation after two shards.
    calls = {"n": 0}
    real = token_cache.tokenize_shard

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real(*args)

    config.data.num_workers = 1
    monkeypatch.setattr(token_cache, "tokenize_shard", flaky)
    with pytest.raises(KeyboardInterrupt):
        preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "resumed")
    monkeypatch.setattr(token_cache, "tokenize_shard", real)
    # Also lose a counted shard, as if the count had been interrupted.
    corpus_root = next((tmp_path / "resumed" / "data").glob("corpus-*"))
    (corpus_root / "index.json").unlink()
    shutil.rmtree(corpus_root / "shards" / "00001")
    done_before = len(list(corpus_root.glob("tokens-*.shards/*")))
    assert done_before == 2
    resumed = preparation.prepare_corpus(RunConfig.from_config(config), tmp_path / "resumed")
    for name in ("tokens", "doc_offsets", "doc_words", "word_starts"):
        np.testing.assert_array_equal(getattr(resumed.tokens, name), getattr(reference.tokens, name))
    assert resumed.budget_report["words"] == reference.budget_report["words"]
    assert not list(corpus_root.glob(".*tmp*"))


def test_other_processes_open_what_process_0_prepared(prepared, tmp_path):
    """open_prepared: the caches prepare_corpus named, without the sources; other settings or a
    changed cache file refused by name."""
    config, workdir, _ = prepared
    copy = tmp_path / "work"
    shutil.copytree(workdir, copy)
    run = RunConfig.from_config(config)
    made, opened = preparation.prepare_corpus(run, copy), preparation.open_prepared(run, copy)
    np.testing.assert_array_equal(opened.tokens.tokens, made.tokens.tokens)
    assert opened.tokenizer.vocab_size == made.tokenizer.vocab_size and opened.budget_report == made.budget_report
    other = synthetic.tiny_config(config.data.corpus, tokenizer="bpe", whole_word_masking=False)
    with pytest.raises(ValueError, match="prepared.json names caches prepared with other data settings"):
        preparation.open_prepared(RunConfig.from_config(other), copy)
    tokens_file = made.tokens.directory / "tokens.npy"
    tokens_file.write_bytes(tokens_file.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ValueError, match=r"the prepared token cache is damaged: .*tokens.npy has changed"):
        preparation.open_prepared(run, copy)
    with pytest.raises(FileNotFoundError, match="every process must see the same --workdir"):
        preparation.open_prepared(run, tmp_path / "elsewhere")


def test_a_workdir_tokenizer_of_other_settings_is_replaced_with_a_line(corpus_dir, tmp_path, capsys):
    """prepare with a BPE tokenizer, then (as a train with the default config would) with a char one:
    the workdir's tokenizer/ is replaced, and a line names the old and the new kind; the same settings
    again keep it without a word."""
    bpe = RunConfig.from_config(synthetic.tiny_config(corpus_dir, tokenizer="bpe"))
    preparation.prepare_corpus(bpe, tmp_path)
    assert "replaced" not in capsys.readouterr().out
    char = RunConfig.from_config(synthetic.tiny_config(corpus_dir))
    preparation.prepare_corpus(char, tmp_path)
    tokenizer_dir = tmp_path / "tokenizer"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"tokenizer: {tokenizer_dir} held a bpe tokenizer of 400 ids prepared with other data.tokenizer or "
        f"model.vocab_size settings; replaced by this run's char tokenizer of 64 ids (set those keys as before to "
        "keep the old one)")
    assert json.loads((tokenizer_dir / "tokenizer.json").read_text())["kind"] == "char"
    preparation.prepare_corpus(char, tmp_path)
    assert "replaced" not in capsys.readouterr().out


def test_a_file_that_grows_during_the_count_is_said_and_its_count_not_kept(tmp_path, monkeypatch):
    """The count read a grown file but keyed it as listed: once the file was back at that size and content, the
    cache was reused with 1,000 documents that are not in the corpus."""
    from babylm_jax.config.data import DataConfig
    from babylm_jax.corpus import corpus_cache
    from babylm_jax.corpus.cache_integrity import FileHashes

    path = tmp_path / "corpus" / "docs.txt"
    path.parent.mkdir()
    path.write_text("小猫在睡觉。\n\n今天天气很好。\n\n他说好的。\n", encoding="utf-8")
    listed = path.read_bytes()
    data_config = DataConfig.from_config(synthetic.tiny_config(path.parent).data)
    files = corpus.corpus_files(corpus.list_sources(data_config), FileHashes(None))  # as prepare lists the corpus
    real_run_tasks = corpus_cache.run_tasks

    def growing(*args, **kwargs):
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(f"\n新的第{i}篇。" for i in range(1000)) + "\n")
        return real_run_tasks(*args, **kwargs)

    monkeypatch.setattr(corpus_cache, "run_tasks", growing)
    with pytest.raises(corpus.CorpusError, match=r"the corpus changed while its words were counted: corpus file "
                       r"docs\.txt has [\d,]+ bytes, [\d,]+ were recorded since it was listed; nothing of this count is "
                       "kept"):
        corpus_cache.count_corpus(data_config, tmp_path / "data", files=files)
    assert not list((tmp_path / "data").glob("corpus-*"))
    monkeypatch.undo()
    path.write_bytes(listed)  # back to the size and content it was listed with
    assert len(list(corpus_cache.count_corpus(data_config, tmp_path / "data").iter_texts())) == 3
