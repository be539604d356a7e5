"""experiments/hanzi_study_table.py: a finished arm's row, read from its workdir, and the table."""
import json

from fixtures.scripts import load_script


def _workdir(tmp_path, tokenizer_dir):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    per_uid = {u: 0.5 for uids in load_script("experiments/hanzi_study_table.py").UIDS.values() for u in uids}
    tasks = {t: {"accuracy": a, "per_uid": per_uid} for t, a in
             (("hanzi_structure", 0.61), ("hanzi_pinyin", 0.55), ("zhoblimp", 0.57123))}
    files = {"eval/results_details.json": {"tasks": tasks},
             "budget.json": {"words": 100, "sources": {"/x/facts_0.3": {"words": 30}, "builtin": {"words": 70}}},
             "leakage.json": {"tasks": {"hanzi_structure": {"leaked": 0}, "hanzi_pinyin": {"leaked": 1}}},
             "unk_audit.json": {"hanzi_structure": {"unk_items": 2}, "hanzi_pinyin": {"unk_items": 0}},
             "summary.json": {"final_eval_loss": 4.5, "wall_time_s": 330.0}}
    for name, obj in files.items():
        (run / name).write_text(json.dumps(obj))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 20, "loss": 5.0, "aux_tone_acc": 0.3, "aux_tone_loss": 1.2}, {"step": 40, "loss": 4.0, "aux_tone_acc": 0.4},
        {"step": 40, "eval_loss": 4.5})) + "\n")
    tokenizer_dir.rename(run / "tokenizer")
    return run


def test_row_and_table(tmp_path):
    from babylm_jax.corpus.tokenizer_training import char_tokenizer_from_counts

    study = load_script("experiments/hanzi_study_table.py")
    char_tokenizer_from_counts({"伴": 2, "字": 1}, 30, 1, False).save(tmp_path / "tok")
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "hanzi_facts.jsonl").write_text('{"text": "伴字亻"}\n', encoding="utf-8")
    run = _workdir(tmp_path, tmp_path / "tok")

    class Args:
        arm, workdir, share, seed, flags = "facts", str(run), "0.3", 0, "--x"
    Args.facts = str(facts)
    row = study.row(Args)
    assert (row["words"], row["fact_words"], row["unk_items"], row["probe_items_leaked"]) == (100, 30, 2, 1)
    assert row["facts_chars_without_own_id"] == 1  # 亻 is not in the tokenizer
    assert row["aux_acc"] == {"aux_tone_acc": 0.4} and row["train_minutes"] == 5.5
    line = study.table([row]).splitlines()[2]
    assert line.startswith("| facts | 0 | 0.3 | 0.610 | 0.550 | 0.5712 | 0.50 / 0.50 / 0.50 / 0.50 |")
    assert "| tone 0.40 |" in line
