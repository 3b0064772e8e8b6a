"""Concept maps: one point per non-empty concept, and the same map for the same seed. What the
Codebook map page plots of a map (marker sizes, escaped hover texts) is tests/views/test_map_figure.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import blobs
from vqlc_core.methods.concepts import ConceptSet, summarize
from vqlc_core.views.maps import BackgroundMaps, concept_map, embed_2d, map_vectors

COLUMNS = ["concept", "size", "n_pred", "dominant_class", "purity", "x", "y", "top_words"]


def concept_set(n_concepts: int, empty: int, seed: int = 0) -> ConceptSet:
    """A concept set over 40 words a concept (concept `empty` has none), with blob-like vectors."""
    rng = np.random.default_rng(seed)
    kept = [k for k in range(n_concepts) if k != empty]
    assignments = np.repeat(kept, 40)
    words = [f"w{k}_{i % 5}" for k in kept for i in range(40)]
    tokens = pd.DataFrame({"text_id": np.arange(len(words)), "word_index": 0, "word": words, "kind": "word",
                           "label": rng.integers(2, size=len(words))})
    vectors, _ = blobs(n_per=1, k=n_concepts, dim=16, seed=seed)
    return ConceptSet("kmeans", assignments, vectors, summarize(tokens, assignments, n_concepts, ["neg", "pos"]),
                      ["neg", "pos"])


def test_a_small_map_has_one_row_per_non_empty_concept():
    cs = concept_set(6, empty=2)
    df = concept_map(cs)
    assert list(df.columns) == COLUMNS
    assert df["concept"].tolist() == [0, 1, 3, 4, 5]
    assert df["size"].tolist() == [40] * 5
    assert df["top_words"].iloc[0].split(", ")[0].startswith("w0_")
    assert np.isfinite(df[["x", "y"]].to_numpy()).all() and df[["x", "y"]].std().min() > 0


@pytest.mark.slow
def test_a_umap_map_is_the_same_for_the_same_seed():  # UMAP compiles with numba on first use (~20 s)
    cs = concept_set(30, empty=7)
    a, b = concept_map(cs, seed=0), concept_map(cs, seed=0)
    assert len(a) == 29 and 7 not in set(a["concept"])
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a[["x", "y"]], concept_map(cs, seed=1)[["x", "y"]])


@pytest.mark.slow
def test_maps_made_in_the_background_are_the_maps_made_here():  # UMAP compiles in both processes
    sets = {"a": map_vectors(concept_set(30, empty=7)), "b": map_vectors(concept_set(25, empty=0, seed=1)),
            "small": map_vectors(concept_set(6, empty=2))}  # PCA: made here
    with BackgroundMaps(sets, seed=0) as maps:
        got = {name: maps.embed(name) for name in sets}
    for name, vectors in sets.items():
        np.testing.assert_array_equal(got[name], embed_2d(vectors, seed=0))  # exactly
    assert not list(maps._dir.parent.glob(maps._dir.name))  # its folder is gone


def test_a_failed_background_map_is_made_here(monkeypatch):
    monkeypatch.setattr("vqlc_core.views.maps._CHILD", "raise SystemExit(3)")
    cs = concept_set(12, empty=3)
    with BackgroundMaps({"a": map_vectors(cs)}, seed=0) as maps:
        monkeypatch.setattr("vqlc_core.views.maps.embed_2d", lambda v, seed: np.full((len(v), 2), 7.0, np.float32))
        assert (maps.embed("a") == 7.0).all() and maps.embed("a").shape == (11, 2)
