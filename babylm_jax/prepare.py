"""Prepare a corpus: `python -m babylm_jax.prepare --config CONFIG --workdir DIR [--data_dir DIR]`.

Writes <workdir>/budget.json (official jieba word count), trains the tokenizer
(<workdir>/tokenizer) and tokenises the corpus into the sharded token cache under
<workdir>/data, all resumable; on a trained workdir it refuses a corpus other than the one the run
was started from (`corpus.run_inputs`), as train's resume does. With --data_dir, also writes <workdir>/leakage.json (which
evaluation items occur in the corpus) and, when hanzi_* folders are there, prints the UNK
audit. `train` runs the same steps itself when the cache is missing. A user error is one line and
exit status 2 (`babylm_jax.config.cli`).
"""
from __future__ import annotations

import json
import pathlib
from typing import Sequence

from absl import flags

from babylm_jax.config import cli
from babylm_jax.core.atomic import atomic_write_json
from babylm_jax.core.progress import StageTimes
from babylm_jax.tasks import leakage
from babylm_jax.tasks import unk_audit
from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import run_inputs
from babylm_jax.corpus.preparation import prepare_corpus
from babylm_jax.core import rundir
from babylm_jax.core.remote import RunPlace
from babylm_jax.core.rundir import checkpoint_steps, workdir_lock

COMMAND = cli.Command("prepare", __doc__, on_stop="the shards counted and tokenised so far are kept; run the same "
                      "command to go on from them")
_CONFIG = COMMAND.config("config", help_string="Path to an ml_collections config file, e.g. configs/base.py.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (token cache, tokenizer, reports).",
                               flag_values=COMMAND.flags)
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Evaluation data (either layout: one folder per task, or the "
                                "official evaluation_data/) for the leakage check and UNK audit.",
                                flag_values=COMMAND.flags)
flags.mark_flags_as_required(["config", "workdir"], flag_values=COMMAND.flags)


def _table(rows: list[list], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    line = lambda row: "  ".join(str(x).rjust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([line(header)] + [line(r) for r in rows])


def main(argv: Sequence[str]) -> None:
    """Parses `argv` (program name first) and prepares the corpus (and the reports)."""
    COMMAND.parse(argv)
    run = RunConfig.from_config(_CONFIG.value)  # every key of the run's config, before any work
    place = RunPlace.reached(_WORKDIR.value)  # a remote workdir: prepared in this host's copy, then pushed
    with workdir_lock(place.local, "prepare"):  # refused at once while a train or prepare holds the workdir
        place.pull()
        prepare_and_report(run, pathlib.Path(place.local))
        place.push()


def prepare_and_report(run: RunConfig, workdir: pathlib.Path) -> None:
    """Prepares the corpus, tokenizer and token cache, and prints the reports."""
    data_config = run.data
    data_dir = _DATA_DIR.value or data_config.leakage.data_dir
    if data_dir and not pathlib.Path(data_dir).is_dir():
        option = "--data_dir" if _DATA_DIR.value else "config key data.leakage.data_dir"
        raise FileNotFoundError(f"{option}={data_dir} is not a directory (give the evaluation data directory)")
    times = StageTimes()
    with times.stage("evaluation items"):  # read (and a bad file named) before the corpus pass, not after it
        detector = data_dir and leakage.LeakDetector.from_data_dir(data_dir, data_config.leakage.ngram,
                                                                   data_config.normalize)
    check = None
    if checkpoint_steps(str(workdir)):  # a trained run's data: only the inputs it was started from, its vocabulary
        run_inputs.check_inputs(workdir, run_inputs.corpus_files(data_config, workdir))
        from babylm_jax.training.checkpoint_vocabulary import resumable, trained_vocabulary  # jax: trained runs only

        check = resumable(trained_vocabulary(str(workdir), workdir))
    prepared = prepare_corpus(run, workdir, times, check)
    report = prepared.budget_report
    print(f"budget: {report['words_raw']:,} jieba words as read (declare this), {report['words']:,} as trained on, "
          f"of {report['word_budget']:,}{' (OVER BUDGET, allowed)' if report['over_budget'] else ''}"
          f"  -> {prepared.budget_path}")
    print(_table([[name, s["documents"], s["lines"], s["characters"], s["words_raw"], s["words"]]
                  for name, s in report["sources"].items()],
                 ["source", "documents", "lines", "characters", "words_raw", "words"]))
    print(f"tokenizer: {prepared.tokenizer.kind}, {prepared.tokenizer.vocab_size} ids -> {workdir / rundir.TOKENIZER}")
    print(f"token cache: {len(prepared.tokens.tokens):,} tokens in {prepared.tokens.num_documents:,} documents "
          f"-> {prepared.tokens.directory}")
    if not detector:
        print(times.summary("prepare"))
        return
    with times.stage("leakage check"):
        leaks = detector.report(prepared.corpus.iter_texts(), int(prepared.corpus.doc_array("doc_chars").sum()))
    atomic_write_json(workdir / rundir.LEAKAGE, leaks)
    print(f"leakage ({leaks['ngram']}-gram / exact sentence): {leaks['training_lines_hit']:,} training lines hit "
          f"-> {workdir / rundir.LEAKAGE}")
    print(_table([[t, s["items"], s["exact"], s["ngram"], s["leaked"]] for t, s in leaks["tasks"].items()],
                 ["task", "items", "exact", "ngram", "leaked"]))
    if unk_audit.hanzi_folders(data_dir):
        audit = unk_audit.unk_audit(prepared.tokenizer, data_dir)
        print("UNK audit (items wrong under the official UNK rule):")
        print(_table([[t, s["items"], s["unk_items"], f"{s['unk_share']:.2%}"] for t, s in audit.items()],
                     ["task", "items", "unk_items", "unk_share"]))
        atomic_write_json(workdir / rundir.UNK_AUDIT, audit)
    print(times.summary("prepare"))
    print(json.dumps({"leaked_items": sum(s["leaked"] for s in leaks["tasks"].values())}))


if __name__ == "__main__":
    COMMAND.run(main)
