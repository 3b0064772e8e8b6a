"""What Explain and Compare call a concept: its id per method and what its members are."""

import json

import numpy as np
import pandas as pd

from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.views.names import carries, concept_title, method_concept, tag_badges


def concept_set(top, distinct, n_pred=0, size=10) -> ConceptSet:
    summary = pd.DataFrame([{"concept": 0, "size": size, "size_all": size, "n_pred": n_pred,
                             "top_words": json.dumps(top), "distinctive_words": json.dumps(distinct),
                             "sentence_words": json.dumps([["gorgeous", 1.0]]), "class_counts": '{"positive": 10}',
                             "dominant_class": "positive", "purity": 1.0, "examples": "[]"}])
    return ConceptSet("vqlc", np.zeros(size, dtype=np.int32), np.zeros((1, 4), np.float32), summary, ["negative",
                                                                                                      "positive"])


def test_two_methods_concepts_of_one_number_read_apart():
    assert method_concept("vqlc", 402) == "VQLC 402" and method_concept("kmeans", 402) == "K-Means 402"


def test_a_word_concept_is_named_by_its_frequent_members_and_its_distinctive_words():
    cs = concept_set([[",", 90], ["and", 50], ["of", 40]], [["engrossing", 0.3], ["and", 0.2], ["exhilarating", 0.1]])
    assert carries(cs, 0) == "',', 'and', 'of' — distinctive: engrossing, exhilarating"
    assert concept_title(cs, "vqlc", 0) == "VQLC 0: ',', 'and', 'of' — distinctive: engrossing, exhilarating"


def test_a_concept_whose_frequent_words_are_its_distinctive_ones_names_them_once():
    cs = concept_set([["but", 9], ["yet", 3]], [["yet", 0.5], ["but", 0.4]])
    assert carries(cs, 0) == "'but', 'yet'"


def test_a_prediction_concept_is_named_by_its_classes_and_sentences():
    cs = concept_set([], [], n_pred=10)
    assert carries(cs, 0).startswith("mostly labelled positive (100%) · gorgeous")


def test_tags_become_one_badge_each():
    assert tag_badges("ADJ (POS) 96% ✓ · positive (sentiment) 91%") == ["ADJ (POS) 96% ✓", "positive (sentiment) 91%"]
    assert tag_badges("") == []
