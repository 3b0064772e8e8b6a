"""An explanation and an ablation as records: what a notebook reads of `Explainer.explain` and
`Explainer.ablate` (`ex.methods["vqlc"].prediction_concepts[0].concept`, `after.delta`). Each
has `to_dict()`, the plain JSON the pages, the server's batches and the build's stored example use."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Word:
    """One word of the explained text and its character span (`text[start:end]`)."""

    word: str
    start: int
    end: int


@dataclass(frozen=True)
class WordConcept:
    """The concept one method assigns a word, with its label."""

    concept: int
    label: str


@dataclass(frozen=True)
class PredictionConcept:
    """One of the prediction representation's top concepts under a method: its id, its
    probability (tempered with the set's calibration) and its label."""

    concept: int
    probability: float
    label: str


@dataclass(frozen=True)
class SalientWord:
    """A salient word: its index among the text's words, its attribution (the words' sum to 1)
    and its concept under each method."""

    index: int
    word: str
    attribution: float
    concepts: dict[str, WordConcept]


@dataclass(frozen=True)
class ConceptContribution:
    """How much one word concept present in the input carries the prediction (`contributions`):
    `score` is p(predicted class) minus that probability with the concept removed under the
    explanation's intervention (local: its centred direction projected out at the tokens of the
    input's words assigned to it; global: at every position), exactly what its Ablate toggle does
    (positive: it supports the predicted class); with Shapley values asked for, the concept's
    Shapley value of the same removals, and `stderr` its sampling error (0 when exact). `words`
    are the indices of the input words assigned to it; `kind` is "word"."""

    concept: int
    label: str
    score: float
    ablated_proba: float  # p(predicted class) with this concept alone removed
    ablated_prediction: str
    words: list[int]
    kind: str
    stderr: float = 0.0


# What `MethodExplanation.to_dict` leaves out when the explainer did not compute contributions.
CONTRIBUTION_FIELDS = ("contributions", "deletion", "joint", "interaction", "base", "intervention", "shapley")


@dataclass(frozen=True)
class MethodExplanation:
    """One method's view of the input: every word's concept id, the prediction representation's
    top concepts, most probable first, and (when computed) the input's word concepts ranked by
    score, highest first (`contributions`). `base`: p(predicted class) with every word concept of
    the input removed together; `joint`: p(x) - base; `interaction`: the share of the joint effect
    that the scores do not add up to. base + sum of scores + (joint - sum of scores) = p(x): the
    waterfall. `deletion`: p(predicted class) as the top-1, top-2, ... are removed together.
    `intervention`: 'local' or 'global'; `shapley`: whether the scores are Shapley values."""

    word_concepts: list[int]
    prediction_concepts: list[PredictionConcept]
    contributions: list[ConceptContribution] | None = None
    deletion: list[float] | None = None
    joint: float | None = None
    interaction: float | None = None
    base: float | None = None
    intervention: str | None = None
    shapley: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: v for k, v in d.items() if k not in CONTRIBUTION_FIELDS or self.contributions is not None}


@dataclass(frozen=True)
class Explanation:
    """Everything the Explain page shows for one input; `methods` holds each method's record by
    its name, and salient words come by decreasing attribution. `to_dict()` is plain JSON."""

    text: str
    layer: int
    prediction: str  # class name
    predicted_index: int
    confidence: float
    probabilities: dict[str, float]
    words: list[Word]
    attributions: list[float]  # per word, normalised to sum 1
    salient: list[SalientWord]
    methods: dict[str, MethodExplanation]
    truncated: bool = False
    info: dict = field(default_factory=dict)  # how the attribution was computed, its completeness error

    def to_dict(self) -> dict:
        d = asdict(self)
        d["methods"] = {n: m.to_dict() for n, m in self.methods.items()}
        return d


@dataclass(frozen=True)
class Ablation:
    """The prediction with concepts projected out of layer l: the new class probabilities, the
    new prediction and its confidence, and `delta`, the new minus the old probability of the
    originally predicted class (negative: the concepts supported the prediction)."""

    proba: dict[str, float]
    prediction: str
    confidence: float
    delta: float

    def to_dict(self) -> dict:
        return asdict(self)
