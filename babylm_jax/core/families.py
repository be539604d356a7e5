"""Model families (`model.family`), one entry each: every fact that differs between families.

    spec = family_spec(config.model.family)   # ValueError naming model.family for an unknown one
    spec.framing.frame(ids), spec.scoring, spec.official_backend, ...

    family   framing                        objective (model.objectives.OBJECTIVES)  scoring  official --backend
    causal   [bos] text [eos]               next_token_objective                     CAUSAL   causal
    mlm      [cls] text [sep]               masked_token_objective                   PLL      mlm
    hybrid   [cls] text [sep]               masked_next_token_objective              MNTP     mntp

A causal family (its framing's `causal`) attends causally, predicts every next token and has
no head transform (a decoder); the others are encoders that attend bidirectionally, predict
the masked tokens and carry BERT's head transform. A family with `causal_rows` trains
`train.hybrid_causal_share` of its rows as causal-LM rows (GPT-BERT).

Adding a family: its `FamilySpec` here, and its objective function in `model.objectives.OBJECTIVES`
under the family's name (one there may serve again); a family whose exported model the shipped `hf/modeling_babylm.py`
does not describe also names its own modelling file beside it.
"""
from __future__ import annotations

import dataclasses

from babylm_jax.core.enums import StrictEnum
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, SEP_ID, Framing

DECODER = Framing(BOS_ID, EOS_ID, causal=True)
ENCODER = Framing(CLS_ID, SEP_ID, causal=False)
CAUSAL_LM = ("AutoModelForCausalLM", "BabyLMForCausalLM")  # (Auto class, class of the modelling file)
MASKED_LM = ("AutoModelForMaskedLM", "BabyLMForMaskedLM")


class Scoring(StrictEnum):
    """How a family's model scores a sentence (eval.zero_shot.scoring); the value names it in results."""

    CAUSAL = "causal"  # the sum of next-token log-probs
    PLL = "pll"  # pseudo-log-likelihood: each token masked in turn, read at its own position
    MNTP = "mntp"  # as PLL, each masked token read at the position before it (GPT-BERT)


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """How a family frames text, trains, scores, places its auxiliary heads and exports."""

    name: str
    framing: Framing  # training documents, scoring, fMRI rows, fine-tuning rows and the exported tokenizer
    scoring: Scoring  # how its model scores minimal pairs
    official_backend: str  # the official pipeline's --backend for the exported model
    aux_position: str  # what train.aux_heads.position="auto" means: "input" or "target"
    hf_models: tuple[tuple[str, str], ...]  # (Auto class, modelling class); the first is the architecture
    hf_modeling_file: str = "modeling_babylm.py"  # shipped beside config.json (babylm_jax/hf/)
    llama_export: bool = False  # a SwiGLU/RMSNorm model of the family exports as transformers' Llama
    causal_rows: bool = False  # train.hybrid_causal_share of the rows train causally (GPT-BERT)

    @property
    def causal(self) -> bool:
        """Whether the family is a decoder: causal attention, every next token predicted."""
        return self.framing.causal

    def causal_share(self, hybrid_causal_share: float) -> float:
        """The share of training rows that attend causally."""
        if self.causal:
            return 1.0
        return hybrid_causal_share if self.causal_rows else 0.0


FAMILY_SPECS: dict[str, FamilySpec] = {spec.name: spec for spec in (
    FamilySpec("causal", DECODER, scoring=Scoring.CAUSAL, official_backend="causal",
               aux_position="input", hf_models=(CAUSAL_LM,), llama_export=True),
    FamilySpec("mlm", ENCODER, scoring=Scoring.PLL, official_backend="mlm",
               aux_position="target", hf_models=(MASKED_LM,)),
    FamilySpec("hybrid", ENCODER, scoring=Scoring.MNTP, official_backend="mntp",
               aux_position="target", hf_models=(MASKED_LM, CAUSAL_LM), causal_rows=True),
)}


def family_spec(family: str) -> FamilySpec:
    """The entry of `model.family`; ValueError naming the key for a family with none."""
    if family not in FAMILY_SPECS:
        raise ValueError(f"config key model.family: {family!r} is not one of {tuple(FAMILY_SPECS)}")
    return FAMILY_SPECS[family]
