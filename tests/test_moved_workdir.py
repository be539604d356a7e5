"""Prepare here, train there: caches are known by their corpus's content, never by its place or dates.

- a prepared workdir and its corpus copied elsewhere (new paths, fresh mtimes) prepare and train with
  nothing counted or tokenised again;
- a corpus file that changed is counted again, after one line naming it;
- a corpus file's sha256 is streamed once: known again by its place and stat, hashed again once touched.
(A trained run moved with its corpus resumes: tests/test_resume_inputs.py.)
"""
import logging
import os
import pathlib
import shutil
import time

import pytest
from fixtures.data import synthetic

from babylm_jax.config.schema import RunConfig
from babylm_jax.core import rundir
from babylm_jax.corpus import cache_integrity, corpus_cache
from babylm_jax.corpus import preparation, token_cache


def copied(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """`cp -r`: the same bytes at a new path, every file's mtime fresh (a second later than the original's)."""
    shutil.copytree(source, target, copy_function=shutil.copy)
    later = time.time() + 1
    for path in target.rglob("*"):
        os.utime(path, (later, later))
    return target


def no_worker_runs(monkeypatch) -> list:
    """Records every worker-pool run of the count and the tokenisation (none expected)."""
    runs = []
    for module in (corpus_cache, token_cache):
        monkeypatch.setattr(module, "run_tasks", lambda fn, *args, **kwargs: runs.append(fn.__name__))
    return runs


@pytest.fixture
def prepared_elsewhere(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """(corpus of a.txt and b.txt, a workdir prepared on it), both under tmp_path/here."""
    corpus = synthetic.write_txt_corpus(tmp_path / "here" / "corpus", 120)
    preparation.prepare_corpus(RunConfig.from_config(synthetic.tiny_config(corpus)), tmp_path / "here" / "run")
    return corpus, tmp_path / "here" / "run"


def test_a_copied_workdir_and_corpus_prepare_nothing_again(prepared_elsewhere, tmp_path, monkeypatch, caplog):
    corpus, workdir = prepared_elsewhere
    there = copied(corpus.parent, tmp_path / "there")
    runs = no_worker_runs(monkeypatch)
    caches = sorted(p.name for p in (there / "run" / rundir.DATA).iterdir())
    with caplog.at_level(logging.INFO):
        again = preparation.prepare_corpus(RunConfig.from_config(synthetic.tiny_config(there / "corpus")), there / "run")
    assert runs == [] and "counting the corpus again" not in caplog.text
    assert sorted(p.name for p in (there / "run" / rundir.DATA).iterdir()) == caches  # no new cache folder
    assert again.corpus.root.parent == there / "run" / rundir.DATA
    first = preparation.prepare_corpus(RunConfig.from_config(synthetic.tiny_config(corpus)), workdir)
    assert again.corpus.root.name == first.corpus.root.name and list(again.tokens.tokens) == list(first.tokens.tokens)


@pytest.mark.slow
def test_a_copied_workdir_and_corpus_train_with_nothing_counted(prepared_elsewhere, tmp_path, monkeypatch, capsys):
    from babylm_jax.training import loop

    corpus, _ = prepared_elsewhere
    there = copied(corpus.parent, tmp_path / "there")
    runs = no_worker_runs(monkeypatch)
    reads = []
    real = cache_integrity.file_record
    monkeypatch.setattr(cache_integrity, "file_record", lambda p: reads.append(p.name) or real(p))
    config = synthetic.tiny_config(there / "corpus")
    config.train.update(num_steps=2, eval_every_steps=100)
    loop.train_and_evaluate(RunConfig.from_config(config), str(there / "run"))
    assert runs == []
    assert reads.count("a.txt") == reads.count("b.txt") == 1  # at their new places: each hashed once
    assert (there / "run" / rundir.CHECKPOINTS / "2").is_dir()


def test_a_changed_corpus_file_is_counted_again_after_one_line_naming_it(prepared_elsewhere, caplog):
    corpus, workdir = prepared_elsewhere
    with open(corpus / "a.txt", "a", encoding="utf-8") as f:
        f.write("\n他们今天去公园散步。\n")
    with caplog.at_level(logging.WARNING):
        preparation.prepare_corpus(RunConfig.from_config(synthetic.tiny_config(corpus)), workdir)
    lines = [r.getMessage() for r in caplog.records if "counting the corpus again" in r.getMessage()]
    assert len(lines) == 1 and "corpus file a.txt has" in lines[0] and "were recorded" in lines[0], lines
    assert "b.txt" not in lines[0]


def test_a_changed_setting_is_named_where_the_corpus_is_counted_again(prepared_elsewhere, caplog):
    corpus, workdir = prepared_elsewhere
    with caplog.at_level(logging.WARNING):
        preparation.prepare_corpus(RunConfig.from_config(synthetic.tiny_config(corpus, shard_chars=3000)), workdir)
    assert "counting the corpus again" in caplog.text and "data.shard_chars 2000 -> 3000" in caplog.text


def test_a_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    path, record_path = tmp_path / "a.txt", tmp_path / "hashes.json"
    path.write_text("一二三")
    reads = []
    real = cache_integrity.file_record
    monkeypatch.setattr(cache_integrity, "file_record", lambda p: reads.append(p) or real(p))

    def hashed(file: pathlib.Path) -> dict:
        monkeypatch.setattr(cache_integrity, "_HASHED", {})  # a new process each time: only the record on disk
        hashes = cache_integrity.FileHashes(record_path)
        record = hashes.record(file)
        hashes.save()
        return record

    first = hashed(path)
    assert first == real(path) and hashed(path) == first and len(reads) == 1  # known by place and stat
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert hashed(path) == first and len(reads) == 2  # touched: read again, the same content
    path.write_text("一二四")
    assert hashed(path) == real(path) != first and len(reads) == 3
    record_path.write_text("{not json")
    assert hashed(path) == real(path) and len(reads) == 4  # a damaged record costs a hash, nothing else
