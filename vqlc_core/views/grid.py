"""Which concepts the Concepts page's grid shows, and in what order: the filter by a linguistic
tag the concepts are aligned with (`tag_alignment`) and the sorts (`SORTS`), on plain lists of
concept ids."""

from __future__ import annotations

import pandas as pd

from vqlc_core.base.runio import RunError
from vqlc_core.evaluate import tag_alignment

ANY_TAG = "any tag"  # the filter that keeps every concept
SORTS = ("id", "size", "purity", "alignment", "faithfulness")
SORT_HELP = ("size: train members; purity: share of the dominant class; alignment: the share of the concept's "
             "strongest tag (casing aside); faithfulness: the mean confidence drop when it is ablated as a test "
             "sentence's prediction concept")


def aligned_index(profiles: pd.DataFrame) -> dict[str, list[int]]:
    """Every tag some concept is aligned with, as its label ('POS: ADJ') in `aligned_tag_labels`
    order (most concepts first), with the ids of those concepts, found in one pass."""
    al = tag_alignment.aligned(profiles)
    with_label: dict[str, set[int]] = {}
    for k, s, t in zip(al["concept"], al["tag_set"], al["tag"]):
        with_label.setdefault(tag_alignment.tag_label(s, t), set()).add(int(k))
    return {label: sorted(with_label[label]) for label in tag_alignment.aligned_tag_labels(profiles)}


def with_tag(ids: list[int], aligned: dict[str, list[int]], tag: str = ANY_TAG) -> list[int]:
    """The concepts of `ids` aligned with `tag` (a label of `aligned_index`), in their order;
    every one of them for ANY_TAG, none for a tag no concept is aligned with."""
    if tag == ANY_TAG:
        return list(ids)
    keep = set(aligned.get(tag, ()))
    return [k for k in ids if k in keep]


def sort_values(how: str, summary: pd.DataFrame, profiles: pd.DataFrame | None = None,
                faithfulness: pd.Series | None = None) -> pd.Series | None:
    """Per concept (the index of `summary`, the concept set's), the value sort `how` orders by,
    NaN where it is unknown; None for 'id'. 'alignment' reads the tag `profiles` (a run without
    tags: every value unknown), 'faithfulness' the concepts' mean confidence drops
    (`evaluation.concept_faithfulness`)."""
    if how not in SORTS:
        raise RunError(f"Unknown sort '{how}'; choose one of {', '.join(SORTS)}.")
    if how == "id":
        return None
    if how in ("size", "purity"):
        values = summary[how]
    elif how == "alignment":  # casing is left out: nearly every concept is all lower case
        values = (profiles[profiles["tag_set"] != "casing"].groupby("concept")["share"].max()
                  if profiles is not None else pd.Series(dtype=float))
    elif faithfulness is None:
        raise ValueError("Sorting by faithfulness needs the concepts' faithfulness (evaluation.concept_faithfulness).")
    else:
        values = faithfulness
    return values.astype(float).reindex(summary.index)


def sorted_by(ids: list[int], values: pd.Series | None) -> list[int]:
    """`ids` by decreasing value (`sort_values`), unknown values last, ties by id; as given when
    `values` is None (the 'id' sort keeps the order it is given)."""
    if values is None:
        return list(ids)
    return sorted(ids, key=lambda k: (pd.isna(values[k]), -(values[k] if not pd.isna(values[k]) else 0), k))
