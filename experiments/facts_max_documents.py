"""How many documents a facts run reads so that it sees as many jieba words as the no-facts run.

    python experiments/facts_max_documents.py NOFACTS_WORKDIR FACTS_DIR/manifest.json TOTAL_WORDS

The facts documents come first; the builtin corpus's documents (counted in the no-facts run's
token cache) fill the rest of TOTAL_WORDS. Prints data.max_documents for the facts run.
"""
import json
import pathlib
import sys

import numpy as np


def max_documents(nofacts_workdir: pathlib.Path, manifest: dict, total_words: int) -> int:
    """The facts' documents plus the corpus documents whose words fit in what the facts leave."""
    index = sorted((nofacts_workdir / "data").glob("corpus-*/index.json"), key=lambda p: p.stat().st_mtime)[-1]
    shards = sorted((index.parent / "shards").iterdir())
    doc_words = np.concatenate([np.load(s / "doc_words.npy") for s in shards])
    keep = int(np.searchsorted(np.cumsum(doc_words), total_words - manifest["words"], side="right"))
    return manifest["documents"] + keep


if __name__ == "__main__":
    workdir, manifest_path, total = sys.argv[1:4]
    print(max_documents(pathlib.Path(workdir), json.loads(pathlib.Path(manifest_path).read_text()), int(total)))
