"""Linguistic tags on the pages (the `annotate` stage, `tag_alignment`): each concept's strongest
tags with their shares on its card, the sidebar's filter by aligned tag and sort of the Concepts
page (what they keep and in what order: `vqlc_core.views.grid`), and one sentence naming the tag
sets a run could not make."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from vqlc_core.data.tags import TAG_SETS
from vqlc_core.evaluate import tag_alignment
from vqlc_core.evaluate.evaluation import concept_faithfulness
from vqlc_core.views import grid

from .escape import plain
from .loaders import concepts, load_run
from .loaders import stamp as loaders_stamp


@st.cache_data(show_spinner=False, max_entries=16)
def profiles(run_dir: str, version: int, method: str) -> pd.DataFrame | None:
    """The method's concept tag profiles, or None for a run without tags."""
    run = load_run(run_dir, version)
    if run.tags is None:
        return None
    return run.tag_profiles(method, cs=concepts(run_dir, version, method))


@st.cache_resource(show_spinner=False, max_entries=16)
def tag_index(run_dir: str, version: int, method: str) -> dict | None:
    """The method's profiles (shared by every session, read only), every concept's card line
    (`lines`) and, for each aligned tag in `aligned_tag_labels` order, the concepts aligned with
    it, found once. None without tags."""
    p = profiles(run_dir, version, method)
    if p is None:
        return None
    return {"profiles": p, "lines": tag_alignment.card_lines(p), "aligned": grid.aligned_index(p)}


def card_line(run_dir: str, stamp: int, method: str, k: int) -> str:
    """Concept k's strongest tags as one line (`tag_alignment.card_lines`), '' for none."""
    index = tag_index(run_dir, stamp, method)
    return index["lines"].get(int(k), "") if index is not None else ""


@st.cache_data(show_spinner=False, max_entries=16)
def faithfulness(run_dir: str, version: int, method: str) -> pd.Series:
    """Per concept: the mean confidence drop when it is ablated as a test sentence's prediction
    concept (the evaluation's rows, shown seed); NaN for a concept never one."""
    return concept_faithfulness(load_run(run_dir, version), method)


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
    """The sidebar's tag filter and sort order (`grid`) applied to concept ids `ids`."""
    rd = str(run.dir)
    index = tag_index(rd, stamp, method)
    p = index["profiles"] if index is not None else None
    if index is not None:
        with_label = index["aligned"]
        choice = st.sidebar.selectbox("Aligned with tag", [grid.ANY_TAG, *with_label], key=f"tag_filter_{method}",
                                      format_func=lambda s: s if s == grid.ANY_TAG else f"{s} ({len(with_label[s])})",
                                      help=f"concepts aligned with the tag: {tag_alignment.ALIGNMENT_RULE}")
        ids = grid.with_tag(ids, with_label, choice)
    else:
        st.sidebar.caption("This run has no linguistic tags; build it again to add them.")
    how = st.sidebar.selectbox("Sort by", grid.SORTS, key=f"concept_sort_{method}", help=grid.SORT_HELP)
    faith = faithfulness(rd, stamp, method) if how == "faithfulness" else None
    return grid.sorted_by(ids, grid.sort_values(how, concepts(rd, stamp, method).summary, p, faith))


@st.cache_data(show_spinner="Aligning the concepts with the tags...", max_entries=8)
def comparison(run_dir: str, version: int) -> pd.DataFrame:
    """The run's aligned-concept table, one row per tag set, one column per method (as the maps
    stage stored it, or computed and stored now)."""
    return tag_alignment.display_frame(tag_alignment.cached_alignment_table(load_run(run_dir, version)))
