"""Concepts aligned with linguistic tags, as ConceptX aligns them: a concept is aligned with a tag
when at least `threshold` (0.9) of its train members that carry a tag of the set carry that one,
unless more than `max_unknown` (0.4) of its members carry none (a concept of punctuation is not
aligned with an entity type) or fewer than `MIN_MEMBERS` carry one.

Per concept and tag set this gives the tag profile (tags above 10% of the known members, with
their shares, as ConceptX keeps a concept's fine-grained profile), the aligned tag, and the tag
that names the concept: among its aligned tags, the one most over-represented against the
corpus (share / the tag's share of all train rows, at least twice), so "ADJ" names a concept
and "lower" casing does not. Counting aligned concepts per method and tag set compares the methods; over seeds, with
95% intervals.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd

from vqlc_core.base.markdown import markdown_table
from vqlc_core.base.runio import RunError, read_json, write_json
from vqlc_core.base.stats import N_BOOT, interval
from vqlc_core.data.tags import TAG_SETS
from vqlc_core.methods.base import display_name
from vqlc_core.methods.concepts import ConceptSet

ALIGN_THRESHOLD = 0.9  # ConceptX's default
MAX_UNKNOWN = 0.4  # ConceptX skips a cluster with more unknown tags than this
MIN_MEMBERS = 5  # tagged train members a concept needs before it can be aligned
# The rule in words, for the pages and the report: written from the constants, never retyped.
ALIGNMENT_RULE = (f"at least {ALIGN_THRESHOLD:.0%} of its tagged train members carry it (at most {MAX_UNKNOWN:.0%} "
                  f"untagged, at least {MIN_MEMBERS} tagged)")
PROFILE_SHARE = 0.1  # tags at least this share of a concept's tagged members form its profile
MIN_NAME_LIFT = 2.0  # an aligned tag names a concept when it is at least this over-represented
PROFILE_COLUMNS = ["concept", "tag_set", "tag", "count", "share", "of_members", "unknown", "lift", "aligned"]
# `alignment_table` as the maps stage (or the first page that needs it) left it in the run
ALIGNMENT_FILE = "ui/tag_alignment.json"
log = logging.getLogger(__name__)


def tag_label(tag_set: str, tag: str) -> str:
    """How a filter or a table names a tag: 'POS: ADJ', 'sentiment: negative'."""
    return f"{TAG_SETS.get(tag_set, tag_set)}: {tag}"


def concept_profiles(assignments: np.ndarray, n_concepts: int, tags: pd.DataFrame, rows: np.ndarray,
                     threshold: float = ALIGN_THRESHOLD, max_unknown: float = MAX_UNKNOWN) -> pd.DataFrame:
    """One row per (concept, tag set, tag) of each concept's profile over the store rows `rows`
    (the train rows): the tag's count, its share of the concept's tagged members (`share`) and of
    all its members (`of_members`), the share of its members with no tag in the set (`unknown`),
    the share over the tag's share of all `rows` (`lift`), and whether the concept is aligned with it (see the module doc)."""
    if not 0 < threshold <= 1:
        raise RunError(f"The alignment threshold must be a share in (0, 1], got {threshold}.")
    rows = np.asarray(rows)
    a = np.asarray(assignments)[rows]
    members = np.bincount(a, minlength=n_concepts)
    out = []
    for s in tags.columns:
        col = tags[s].iloc[rows] if isinstance(tags[s].dtype, pd.CategoricalDtype) else \
            tags[s].iloc[rows].astype("category")
        cats = list(col.cat.categories)
        if not cats:
            continue
        codes = col.cat.codes.to_numpy()
        known = codes >= 0
        counts = np.bincount(a[known] * len(cats) + codes[known], minlength=n_concepts * len(cats))
        counts = counts.reshape(n_concepts, len(cats))
        tagged = counts.sum(1)
        base = counts.sum(0) / max(int(tagged.sum()), 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = counts / tagged[:, None]
            unknown = 1 - tagged / members
        top = counts.argmax(1)
        keep = (share >= PROFILE_SHARE) | (np.arange(len(cats))[None, :] == top[:, None])
        keep &= counts > 0
        k, t = np.nonzero(keep)
        aligned = ((t == top[k]) & (share[k, t] >= threshold) & (unknown[k] <= max_unknown)
                   & (tagged[k] >= MIN_MEMBERS))
        out.append(pd.DataFrame({"concept": k, "tag_set": s, "tag": np.asarray(cats, dtype=object)[t],
                                 "count": counts[k, t], "share": share[k, t], "of_members": counts[k, t] / members[k],
                                 "unknown": unknown[k],
                                 "lift": share[k, t] / base[t], "aligned": aligned}))
    if not out:
        return pd.DataFrame(columns=PROFILE_COLUMNS)
    df = pd.concat(out, ignore_index=True)
    order = {s: i for i, s in enumerate(TAG_SETS)}
    df["_set"] = df["tag_set"].map(order).fillna(len(order))
    return df.sort_values(["concept", "_set", "share"], ascending=[True, True, False]).drop(columns="_set") \
        .reset_index(drop=True)


def aligned(profiles: pd.DataFrame) -> pd.DataFrame:
    """The aligned rows of `profiles`, one per (concept, tag set) at most."""
    return profiles[profiles["aligned"]]


def tag_names(profiles: pd.DataFrame) -> dict[int, str]:
    """concept -> the name its aligned tags give it ('ADJ (POS, from tags)'): the most
    over-represented aligned tag, if it is at least MIN_NAME_LIFT times as common in the concept as
    in the corpus (a concept aligned only with 'lower' casing keeps its top words)."""
    al = aligned(profiles)
    al = al[al["lift"] >= MIN_NAME_LIFT].sort_values("lift", ascending=False).drop_duplicates("concept")
    return {int(k): f"{t} ({TAG_SETS.get(s, s)}, from tags)"
            for k, s, t in zip(al["concept"], al["tag_set"], al["tag"])}


def _strongest(profiles: pd.DataFrame, n: int, min_share: float) -> pd.DataFrame:
    """Each concept's strongest tags (see `top_tags`), in order, the concepts in one pass."""
    p = profiles[profiles["of_members"] >= min_share]
    return p.sort_values(["concept", "lift"], ascending=[True, False], kind="stable").groupby("concept").head(n)


def _as_tags(p: pd.DataFrame) -> list[dict]:
    return [{"tag_set": s, "tag": t, "share": float(sh), "aligned": bool(al)}
            for s, t, sh, al in zip(p["tag_set"], p["tag"], p["of_members"], p["aligned"])]


def top_tags(profiles: pd.DataFrame, k: int, n: int = 3, min_share: float = 0.5) -> list[dict]:
    """Concept k's strongest tags for a card: tags of at least `min_share` of all its members
    (a tag of 3 of its 4 entity tokens is not one), the most over-represented first (so 'lower'
    casing comes last), at most `n`; each with that share and whether the concept is aligned."""
    return _as_tags(_strongest(profiles[profiles["concept"] == k], n, min_share))


def card_lines(profiles: pd.DataFrame, n: int = 3, min_share: float = 0.5) -> dict[int, str]:
    """concept -> `tags_line(top_tags(...))` for every concept with a strong tag, in one pass
    (the Concepts grid, pins and the HTML export)."""
    return {int(k): tags_line(_as_tags(g)) for k, g in _strongest(profiles, n, min_share).groupby("concept")}


def tags_line(tags: list[dict]) -> str:
    """'ADJ (POS) 96% · negative (sentiment) 91%' for `top_tags`' output ('' for none); an aligned
    tag is marked with a check mark."""
    return " · ".join(f"{t['tag']} ({TAG_SETS.get(t['tag_set'], t['tag_set'])}) {t['share']:.0%}"
                      + (" ✓" if t["aligned"] else "") for t in tags)


def concepts_aligned_with(profiles: pd.DataFrame, label: str) -> list[int]:
    """The concepts aligned with the tag named `label` ('POS: ADJ'), in id order."""
    al = aligned(profiles)
    hit = [tag_label(s, t) == label for s, t in zip(al["tag_set"], al["tag"])]
    return sorted(int(k) for k in al.loc[hit, "concept"].unique())


def aligned_tag_labels(profiles: pd.DataFrame) -> list[str]:
    """Every tag some concept is aligned with, as 'SET: tag', most concepts first."""
    al = aligned(profiles)
    labels = pd.Series([tag_label(s, t) for s, t in zip(al["tag_set"], al["tag"])], dtype=object)
    return labels.value_counts().index.tolist() if len(labels) else []


def alignment_counts(profiles: pd.DataFrame, members: np.ndarray) -> pd.DataFrame:
    """Per tag set: concepts aligned, their share of the concepts with at least MIN_MEMBERS train
    members (`considered`), the share of train rows that fall in an aligned concept (`rows`: a
    method that splits off many small one-word concepts aligns more of them, not more rows), and
    the distinct tags. `members` holds each concept's train members."""
    al = aligned(profiles)
    members = np.asarray(members)
    n_considered = int((members >= MIN_MEMBERS).sum())
    out = []
    for s in TAG_SETS:
        mine = al[al["tag_set"] == s]
        ids = mine["concept"].unique()
        out.append({"tag_set": s, "aligned": len(ids), "share": len(ids) / max(n_considered, 1),
                    "rows": float(members[ids].sum() / max(members.sum(), 1)), "tags": int(mine["tag"].nunique()),
                    "considered": n_considered})
    return pd.DataFrame(out)


def comparison(per_seed: dict[str, list[pd.DataFrame]], seed: int = 0) -> pd.DataFrame:
    """Per method and tag set, from each seed's `alignment_counts`: the mean aligned count and the
    mean share of rows in aligned concepts, each with its 95% interval over seeds (bootstrap; one
    seed: the value itself), and the means of the share of concepts, the distinct tags and the
    concepts considered."""
    rng = np.random.default_rng(seed)
    out = []
    for method, frames in per_seed.items():
        stacked = pd.concat([f.assign(seed_i=i) for i, f in enumerate(frames)], ignore_index=True)
        for s, g in stacked.groupby("tag_set", sort=False):
            row = {"method": method, "tag_set": s, "n_seeds": len(g)}
            for col in ("aligned", "rows"):
                x = g[col].to_numpy(dtype=float)
                low, high = interval(x[rng.integers(0, len(x), size=(N_BOOT, len(x)))].mean(1)) if len(x) > 1 \
                    else (x[0], x[0])
                row.update({col: float(x.mean()), f"{col}_low": float(low), f"{col}_high": float(high)})
            row.update({c: float(g[c].mean()) for c in ("share", "tags", "considered")})
            out.append(row)
    return pd.DataFrame(out)


def alignment_table(run, threshold: float = ALIGN_THRESHOLD) -> pd.DataFrame:
    """`comparison` for a run: every built method, each of the build's seeds."""
    per_seed = {}
    for m in run.methods_built():
        frames = []
        for seed in run.cfg.method_seeds:
            path = run.method_dir(m, seed)
            if not (path / "assignments.npy").exists():
                continue
            cs = ConceptSet.load(path, n_rows=run.store.n_rows, dim=run.store.dim)
            members = np.bincount(cs.assignments[run.train_rows], minlength=cs.n_concepts)
            frames.append(alignment_counts(run.tag_profiles(m, seed, cs, threshold), members))
        per_seed[m] = frames
    return comparison(per_seed, seed=run.cfg.seed)


def alignment_key(run, threshold: float = ALIGN_THRESHOLD) -> dict:
    """What `alignment_table` reads, as JSON: the sealed files (digests) of the texts, store, tags
    and every built method's seeds, the methods, the seeds and the threshold."""
    stages, methods = run.manifest.data["stages"], run.methods_built()
    key = {"files": {s: stages.get(s, {}).get("files") for s in ("texts", "extract", "annotate", *methods)},
           "methods": methods, "seeds": list(run.cfg.method_seeds), "seed": run.cfg.seed, "threshold": threshold}
    return json.loads(json.dumps(key))


def cached_alignment_table(run, threshold: float = ALIGN_THRESHOLD) -> pd.DataFrame:
    """`alignment_table`, read from the run's `ALIGNMENT_FILE` when it was computed from the same
    files and settings (`alignment_key`); otherwise computed and stored there. The `maps` stage
    stores it, so the Compare page does not load every seed's concepts to show it."""
    path, key = run.dir / ALIGNMENT_FILE, alignment_key(run, threshold)
    try:
        stored = read_json(path) if path.exists() else None
    except (OSError, ValueError):  # an unreadable copy is only a missed shortcut
        stored = None
    if isinstance(stored, dict) and stored.get("key") == key:
        return pd.DataFrame(stored["table"]["data"], columns=stored["table"]["columns"])
    table = alignment_table(run, threshold)
    if len(table):
        try:
            write_json(path, {"key": key, "table": table.to_dict(orient="split", index=False)})
        except OSError:
            log.warning("vqlc: could not store the alignment table in %s", path, exc_info=True)
    return table


def display_frame(table: pd.DataFrame) -> pd.DataFrame:
    """`comparison`'s table for people: one row per tag set, one column per method (by display
    name) holding 'aligned [95% interval] (share of concepts) · share of rows · distinct tags'."""
    out = pd.DataFrame({"tag set": [TAG_SETS[s] for s in TAG_SETS]})
    for m, g in table.groupby("method", sort=False):
        g = g.set_index("tag_set").reindex(list(TAG_SETS))
        cells = []
        for r in g.itertuples():
            span = "" if r.n_seeds < 2 else f" [{r.aligned_low:.0f}, {r.aligned_high:.0f}]"
            rows = "" if r.n_seeds < 2 else f" [{100 * r.rows_low:.1f}, {100 * r.rows_high:.1f}]"
            cells.append(f"{r.aligned:.0f}{span} ({r.share:.0%}) · {r.rows:.1%}{rows} of rows · {r.tags:.0f} "
                         f"tag{'' if round(r.tags) == 1 else 's'}")
        out[display_name(m)] = cells
    return out


def missing_tag_sets(run) -> dict[str, str]:
    """Tag sets the run's `annotate` stage could not make, each with why (the pages say so)."""
    return run.manifest.data["stages"].get("annotate", {}).get("missing", {})


def alignment_markdown(run, threshold: float = ALIGN_THRESHOLD) -> str:
    """The run's aligned-concept table as markdown with its heading line ('' before `annotate`)."""
    if run.tags is None:
        return ""
    df = display_frame(alignment_table(run, threshold))
    seeds = len(run.cfg.method_seeds)
    head = (f"Concepts aligned with linguistic tags (ConceptX: at least {threshold:.0%} of a concept's tagged train "
            f"members carry the tag, at most {MAX_UNKNOWN:.0%} untagged, at least {MIN_MEMBERS} tagged): "
            + f"concepts aligned and their share of the concepts with ≥ {MIN_MEMBERS} train members · the share of "
              "train rows in an aligned concept · distinct tags"
            + (" (means over seeds [95% intervals])" if seeds > 1 else ""))
    missing = missing_tag_sets(run)
    note = f"\n\nNot made: {', '.join(f'{TAG_SETS[s]} ({why})' for s, why in missing.items())}." if missing else ""
    return head + ":\n\n" + markdown_table(list(df.columns), df.itertuples(index=False), numeric=set()) + note
