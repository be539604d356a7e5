"""The UNK audit counts exactly the hanzi items the official UNK rule would score wrong."""
import pathlib

import pytest

from babylm_jax.corpus.tokenizer_training import char_tokenizer_from_counts
from babylm_jax.tasks.unk_audit import unk_audit

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "minimal_pairs"


def test_unk_audit_counts_items_with_an_unknown_character():
    # hanzi_pinyin fixture: item 1 uses 妈/马/你, item 2 uses 天/田/山; leave out 你 only.
    text = "“妈”和“马”的声母相同。“天”和“田”的韵母相同。“山”"
    tokenizer = char_tokenizer_from_counts({c: 1 for c in text}, vocab_size=200, min_count=1, byte_fallback=False)
    report = unk_audit(tokenizer, FIXTURES)
    assert report["hanzi_pinyin"] == {"items": 2, "unk_items": 1, "unk_share": pytest.approx(0.5)}
    assert set(report) == {"hanzi_pinyin", "hanzi_structure"}


def test_byte_fallback_tokenizer_never_loses_an_item():
    tokenizer = char_tokenizer_from_counts({"妈": 1}, vocab_size=300, min_count=1, byte_fallback=True)
    assert tokenizer.unk_id is None
    report = unk_audit(tokenizer, FIXTURES)
    assert all(r["unk_items"] == 0 and r["items"] > 0 for r in report.values())
