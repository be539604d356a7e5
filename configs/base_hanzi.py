"""configs/base.py as the hanzi track's best CPU arm: character facts and auxiliary reading/radical heads.

    python -m babylm_jax.train --config configs/base_hanzi.py --workdir runs/base_hanzi

The arm "facts_heads_input" of the hanzi study (experiments/README.md, "auxiliary heads, radicals
as tokens", with its scores and times), the best of its arms on both hanzi probes: 1,200 steps
of base.py's model, 30% of the words generated facts about the 1,000 most frequent hanzi (which
prepare writes into the workdir, `data.hanzi_facts`: 806,982 jieba words, 2,377 paragraphs, the
study's facts), in front of the first 36,684 documents of the builtin corpus (the facts replace
its last documents, so the run has the 2.69M words of base.py's corpus), every corpus hanzi an id of its own, and heads for syllable (weight
0.3), tone, initial, final and radical (0.1 each) at each token's own position
(train.aux_heads.position="auto" for a causal model); characters as tokens (6,000 ids), as the
study measured it, not base.py's jieba words. The heads are training-only: the exported
model and every score path are those of a run without them.
"""
import pathlib

import ml_collections

from babylm_jax.config.files import load_config_file

FACTS_WORDS = 807_275  # the study's size for the facts (tools.hanzi_facts --words): 2,377 documents of 806,982
FACTS_DOCUMENTS = 2_377
BUILTIN_DOCUMENTS = 36_684 - FACTS_DOCUMENTS  # the first builtin documents beside them: 2.69M words in all


def get_config() -> ml_collections.ConfigDict:
    config = load_config_file(pathlib.Path(__file__).with_name("base.py"))
    config.data.hanzi_facts.update(share=FACTS_WORDS / config.data.word_budget, characters=1000)
    config.data.max_documents = FACTS_DOCUMENTS + BUILTIN_DOCUMENTS  # the facts come first, then builtin
    config.data.tokenizer.update(kind="char", required_characters="corpus_cjk")  # the arm's characters
    config.model.vocab_size = 6000
    config.train.num_steps = 1200
    config.train.aux_heads.update(syllable=0.3, tone=0.1, initial=0.1, final=0.1, radical=0.1)
    return config
