"""configs/base.py plus the hanzi track: character facts in the corpus, no UNK on any hanzi.

    python -m babylm_jax.tools.hanzi_facts --out runs/hanzi_facts --characters 1000 --words 1300000
    python -m babylm_jax.train --config configs/base_hanzi.py --workdir runs/base_hanzi

The facts directory (data.paths) is written by babylm_jax.tools.hanzi_facts; budget.json counts it
as its own source. Everything else follows base.py. Measured in experiments/README.md ("Hanzi
track"); experiments/hanzi_measure.sh reruns the measurement.
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.data.paths = (*config.data.paths, "runs/hanzi_facts")
    config.data.tokenizer.required_characters = "corpus_cjk"
    return config
