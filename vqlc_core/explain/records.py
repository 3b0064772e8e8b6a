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
    """One method's view of the input. base + sum of scores + (joint - sum of scores) = p(x):
    the waterfall the Explain page draws.

    Attributes:
        word_concepts (list of int): every word's concept id, in word order.
        prediction_concepts (list of PredictionConcept): the prediction representation's top
            concepts, most probable first.
        contributions (list of ConceptContribution or None): the input's word concepts ranked by
            score, highest first; None when not computed.
        deletion (list of float or None): p(predicted class) as the top-1, top-2, ... concepts
            are removed together.
        joint (float or None): p(x) minus `base`.
        interaction (float or None): the share of the joint effect the scores do not add up to.
        base (float or None): p(predicted class) with every word concept of the input removed
            together.
        intervention (str or None): where the concepts were removed, 'local' or 'global'.
        shapley (bool): whether the scores are Shapley values rather than single removals.
    """

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
        """Plain JSON types; the attribution's fields only when it was computed."""
        d = asdict(self)
        return {k: v for k, v in d.items() if k not in CONTRIBUTION_FIELDS or self.contributions is not None}


@dataclass(frozen=True)
class Explanation:
    """Everything the Explain page shows for one input (`Explainer.explain`).

    Attributes:
        text (str): the input.
        layer (int): the layer the concepts live at.
        prediction (str): the predicted class's name.
        predicted_index (int): its index in the run's class names.
        confidence (float): the predicted class's probability.
        probabilities (dict of str to float): every class's probability.
        words (list of Word): the input's words with their character spans.
        attributions (list of float): each word's Integrated Gradients share (they sum to 1).
        salient (list of SalientWord): the salient words, by decreasing attribution, each with
            its concept under every method.
        methods (dict of str to MethodExplanation): each method's view, by its name.
        truncated (bool): the input was longer than the model reads, and its end was cut.
        info (dict): how the attribution was computed (baseline, steps) and its completeness
            error.

    Examples:
        >>> ex = vq.open_run("default").explainer().explain("a gorgeous, witty film")
        >>> ex.prediction, [s.word for s in ex.salient]
    """

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
        """Plain JSON types, as the pages and the server's batches use them."""
        d = asdict(self)
        d["methods"] = {n: m.to_dict() for n, m in self.methods.items()}
        return d


@dataclass(frozen=True)
class Ablation:
    """The prediction with concepts projected out of layer l (`Explainer.ablate`).

    Attributes:
        proba (dict of str to float): every class's new probability.
        prediction (str): the new predicted class.
        confidence (float): its probability.
        delta (float): the new minus the old probability of the originally predicted class
            (negative: the concepts supported the prediction).
    """

    proba: dict[str, float]
    prediction: str
    confidence: float
    delta: float

    def to_dict(self) -> dict:
        """Plain JSON types."""
        return asdict(self)
