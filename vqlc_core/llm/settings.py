"""The settings of `vqlc judge` and `vqlc label` (`JudgeConfig`, `LabelConfig`) and the defaults
they name, apart from the code that runs them: the command line generates its options from these
classes without importing pandas or the concept sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vqlc_core.base.options import opt
from vqlc_core.llm.endpoint import SPEC_HELP
from vqlc_core.llm.label_prompts import LABEL_TOKENS

N_JUDGED = 100  # dev sentences judged
TOKENS_PER_CONCEPT = 32  # the answer's budget per concept when --max-tokens is not given
N_CONTEXTS = 20  # member contexts shown to write a label
N_HELD_OUT = 5  # held-out members (and as many non-members) to score it


@dataclass
class JudgeConfig:
    """`vqlc judge`'s settings; its command-line options are generated from these fields."""

    judge: list[str] | None = opt(None, SPEC_HELP + "; repeat it for several judges")
    n: int = opt(N_JUDGED, "dev sentences to judge, stratified by true/false positive/negative")
    seed: int = opt(0, "seed of the sample, the letters' order and the bootstrap")
    methods: tuple[str, ...] | None = opt(None, "the methods to compare (default: every built method)")
    max_tokens: int | None = opt(None, f"the longest answer a judge may give, in tokens (default: 16 + "
                                       f"{TOKENS_PER_CONCEPT} per concept shown)")


@dataclass
class LabelConfig:
    """`vqlc label`'s settings; its command-line options are generated from these fields."""

    EXCLUSIVE: ClassVar[tuple[str, ...]] = ("concepts", "max_concepts")  # options that exclude each other

    method: str | None = opt(None, "the concept method to label (default: the run's first built method, e.g. vqlc)")
    concepts: tuple[int, ...] | None = opt(None, "label only these concept ids (default: every concept with train "
                                                 "members)")
    max_concepts: int | None = opt(None, "label only the N largest concepts")
    judge: list[str] | None = opt(None, "the model that writes and scores the labels: " + SPEC_HELP)
    n_contexts: int = opt(N_CONTEXTS, "member contexts shown to write a label", flag="--contexts")
    n_held_out: int = opt(N_HELD_OUT, "held-out member contexts, and as many non-members, to score a label by "
                                      f"detection (default: {N_HELD_OUT}; 0 skips scoring)", flag="--held-out")
    seed: int = opt(0, "seed of the contexts drawn")
    max_tokens: int = opt(LABEL_TOKENS, "the longest label answer, in tokens")
