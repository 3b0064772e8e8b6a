"""One concept as a record: what a notebook reads of concept k of a `ConceptSet` (iterating a
set yields these), with `to_dict()` for JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# What a concept's vector is, by name. Every definition is kept with the set (extra
# "vectors_<name>"), so a measurement can switch between them without refitting.
CONCEPT_VECTORS = {
    "fitset": "the mean state of the concept's fit-set members (the rows the method was fitted on)",
    "train": "the mean state of all the concept's train members, the rows `predict` assigned after the fit included",
    "centre": "the method's own centre: VQLC's code decoded into the model's space, the K-Means centroid, the "
              "LACOAT cluster mean (the fit-set mean for a method without one)",
}


@dataclass(frozen=True)
class Concept:
    """Concept `id` of a method's set: its label (as the pages show it), its train members'
    counts, words and classes, and its vector (the mean state of its members, by the set's
    definition). `ConceptSet.concept(k)` gives one; iterating over a set gives them all.

    Attributes:
        id (int): the concept's id in its set.
        method (str): the method's name ('vqlc').
        label (str): its name as the pages show it (a label, an aligned tag or its top words).
        size (int): its train members.
        size_all (int): its members among all rows, dev and test included.
        is_prediction (bool): mostly prediction rows (pooled states) rather than words.
        top_words (list of (str, int)): its most frequent member words, with their counts.
        distinctive_words (list of (str, float)): its most distinctive member words by
            class-based TF-IDF, with their scores.
        class_counts (dict of str to int): its train members by their text's class.
        dominant_class (str): the class most of its members belong to.
        purity (float): the share of its members in `dominant_class`.
        vector (ndarray of shape (d,)): its vector in the model's hidden space.
        examples (list of (int, int)): `(text_id, word_index)` of sampled train members.

    Examples:
        >>> c = vq.open_run("default").concepts("vqlc").concept(3)
        >>> c.label, c.size, c.top_words[:3]
    """

    id: int
    method: str
    label: str
    size: int  # train members
    size_all: int  # members among all rows, dev and test included
    is_prediction: bool  # mostly prediction rows (pooled states) rather than words
    top_words: list[tuple[str, int]]
    distinctive_words: list[tuple[str, float]]
    class_counts: dict[str, int]
    dominant_class: str
    purity: float
    vector: np.ndarray
    examples: list[tuple[int, int]]

    def to_dict(self) -> dict:
        """Plain JSON types (the vector as a list)."""
        return {**asdict(self), "vector": self.vector.tolist()}
