"""Linguistic tags on the pages (the `annotate` stage, `tag_alignment`): each concept's strongest
tags with their shares on its card, the filter by aligned tag and the sort of the Concepts page,
and one sentence naming the tag sets a run could not make."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from vqlc_core.data.tags import TAG_SETS
from vqlc_core.evaluate import tag_alignment
from vqlc_core.evaluate.evaluation import concept_faithfulness

from .loaders import concepts, load_run
from .escape import plain
from .loaders import stamp as loaders_stamp

SORTS = ("id", "size", "purity", "alignment", "faithfulness")
ANY = "any tag"


@st.cache_data(show_spinner=False, max_entries=16)
def profiles(run_dir: str, _stamp: int, method: str) -> pd.DataFrame | None:
    """The method's concept tag profiles, or None for a run without tags."""
    run = load_run(run_dir, _stamp)
    if run.tags is None:
        return None
    return run.tag_profiles(method, cs=concepts(run_dir, _stamp, method))


@st.cache_resource(show_spinner=False, max_entries=16)
def tag_index(run_dir: str, _stamp: int, method: str) -> dict | None:
    """The method's profiles (shared by every session, read only), every concept's card line
    (`lines`) and, for each aligned tag in `aligned_tag_labels` order, the concepts aligned with
    it, found once. None without tags."""
    p = profiles(run_dir, _stamp, method)
    if p is None:
        return None
    al = tag_alignment.aligned(p)
    with_label: dict[str, set[int]] = {}
    for k, s, t in zip(al["concept"], al["tag_set"], al["tag"]):
        with_label.setdefault(tag_alignment.tag_label(s, t), set()).add(int(k))
    return {"profiles": p, "lines": tag_alignment.card_lines(p),
            "aligned": {lab: sorted(with_label[lab]) for lab in tag_alignment.aligned_tag_labels(p)}}


def card_line(run_dir: str, stamp: int, method: str, k: int) -> str:
    """Concept k's strongest tags as one line (`tag_alignment.card_lines`), '' for none."""
    index = tag_index(run_dir, stamp, method)
    return index["lines"].get(int(k), "") if index is not None else ""


@st.cache_data(show_spinner=False, max_entries=16)
def faithfulness(run_dir: str, _stamp: int, method: str) -> pd.Series:
    """Per concept: the mean confidence drop when it is ablated as a test sentence's prediction
    concept (the evaluation's rows, shown seed); NaN for a concept never one."""
    return concept_faithfulness(load_run(run_dir, _stamp), method)


def tags_caption(run, method: str, k: int, stamp: int) -> None:
    """Concept k's strongest tags under its name ('Tags: ADJ (POS) 96% · ...'), if any."""
    line = card_line(str(run.dir), stamp, method, k)
    if line:
        st.caption(plain("Tags: " + line), help="the share of the concept's train members with each tag, the "
                   "tags most over-represented against the corpus first; ✓: the concept is aligned with the tag ("
                   f"{tag_alignment.ALIGNMENT_RULE}, as ConceptX)")


def pin_tags(run, method: str, ids) -> dict[int, str]:
    """Each concept of `ids`' strongest tags as one line, for a pin (its exports carry them)."""
    rd, sp = str(run.dir), loaders_stamp(run)
    return {int(k): line for k in ids if (line := card_line(rd, sp, method, k))}


def missing_caption(run) -> None:
    """One sentence naming the tag sets this run could not make, and why."""
    missing = tag_alignment.missing_tag_sets(run)
    if missing:
        whys = sorted(set(missing.values()))
        st.caption(plain(f"No {', '.join(TAG_SETS[s] for s in missing)} tags for this run: {'; '.join(whys)}."))


def filter_and_sort(run, method: str, stamp: int, ids: list[int]) -> list[int]:
    """The sidebar's tag filter and sort order applied to concept ids `ids`."""
    rd = str(run.dir)
    cs = concepts(rd, stamp, method)
    index = tag_index(rd, stamp, method)
    p = index["profiles"] if index is not None else None
    if p is not None:
        with_label = index["aligned"]
        choice = st.sidebar.selectbox("Aligned with tag", [ANY, *with_label], key=f"tag_filter_{method}",
                                      format_func=lambda s: s if s == ANY else f"{s} ({len(with_label[s])})",
                                      help=f"concepts aligned with the tag: {tag_alignment.ALIGNMENT_RULE}")
        if choice != ANY:
            keep = set(with_label[choice])
            ids = [k for k in ids if k in keep]
    else:
        st.sidebar.caption("This run has no linguistic tags; build it again to add them.")
    how = st.sidebar.selectbox("Sort by", SORTS, key=f"concept_sort_{method}",
                               help="size: train members; purity: share of the dominant class; alignment: the share "
                                    "of the concept's strongest tag (casing aside); faithfulness: the mean "
                                    "confidence drop when it is ablated as a test sentence's prediction concept")
    if how == "id":
        return ids
    if how in ("size", "purity"):
        key = cs.summary[how]
    elif how == "alignment":
        # casing is left out: nearly every concept is all lower case
        key = p[p["tag_set"] != "casing"].groupby("concept")["share"].max() if p is not None else pd.Series(dtype=float)
    else:
        key = faithfulness(rd, stamp, method)
    key = key.reindex(range(cs.n_concepts))
    return sorted(ids, key=lambda k: (pd.isna(key[k]), -(key[k] if not pd.isna(key[k]) else 0), k))


@st.cache_data(show_spinner="Aligning the concepts with the tags...", max_entries=8)
def comparison(run_dir: str, _stamp: int) -> pd.DataFrame:
    """The run's aligned-concept table, one row per tag set, one column per method (as the maps
    stage stored it, or computed and stored now)."""
    return tag_alignment.display_frame(tag_alignment.cached_alignment_table(load_run(run_dir, _stamp)))
