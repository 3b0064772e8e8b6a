"""What the dashboard shows, as plain data: a stable colour per concept, the concepts that hold
a word, a concept's member contexts with the word located in its sentence, the sentences that
show a prediction concept (its nearest train prediction rows) and its share of word rows, pages
of a concept grid, the concepts an explanation puts forward, HTML for a sentence whose words are
coloured by concept, the methods' cost table, case-study pins, and the command that builds a run
as it is.

Every piece of text that reaches HTML here goes through `html.escape`; the pages only render.
"""

from __future__ import annotations

import colorsys
import html
import json
import math
import shlex
from dataclasses import fields

import numpy as np
import pandas as pd

_GOLDEN = 0.618033988749895  # successive concept ids get well-separated hues
COST_COLUMNS = ["method", "fit_time_s", "peak_rss_mb", "n_fit_rows", "perplexity", "dead_codes", "mean_purity",
                "test_prediction_distinct", "test_prediction_purity", "test_prediction_largest_share"]


# --- colours and HTML ------------------------------------------------------------------------

def concept_color(k: int) -> str:
    """A light, stable colour for concept k (the same id always gets the same colour)."""
    hue = (int(k) * _GOLDEN) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.80, 0.75)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def highlight_html(text: str, start: int, end: int) -> str:
    """`text` with the characters start..end wrapped in <mark>, everything escaped."""
    e = html.escape
    return f"{e(text[:start])}<mark><b>{e(text[start:end])}</b></mark>{e(text[end:])}"


def colored_sentence_html(text: str, words: list[dict], concept_ids: list[int], labels: dict[int, str]) -> str:
    """The input with every word in a span coloured by its concept; hovering shows the concept's
    label. `words` are {"start", "end"} character spans in `text`; text between words is kept."""
    e, out, pos = html.escape, [], 0
    for w, k in zip(words, concept_ids):
        s, t = int(w["start"]), int(w["end"])
        out.append(e(text[pos:s]))
        title = e(labels.get(int(k), f"c{k}"), quote=True)
        out.append(f'<span title="{title}" style="background:{concept_color(k)};padding:1px 3px;'
                   f'border-radius:3px;line-height:2">{e(text[s:t])}<sub style="opacity:.6">{int(k)}</sub></span>')
        pos = t
    out.append(e(text[pos:]))
    return "".join(out)


# --- the corpus side ---------------------------------------------------------------------------

def word_spans(text: str, words: list[str]) -> list[tuple[int, int] | None]:
    """Character span of each word of `text`, the words given in order (the store's token
    table). Each word is searched from the end of the previous one, so a repeated word or a
    word that is part of another gets its own occurrence; None where a word is not found."""
    spans, pos = [], 0
    for w in words:
        i = text.find(w, pos)
        if i < 0:
            spans.append(None)
            continue
        spans.append((i, i + len(w)))
        pos = i + len(w)
    return spans


def concepts_with_word(tokens: pd.DataFrame, assignments: np.ndarray, word: str) -> pd.DataFrame:
    """Concepts whose members include `word` (case-insensitive): concept, count, most first."""
    word = word.strip().lower()
    if not word:
        return pd.DataFrame({"concept": [], "count": []}, dtype=np.int64)
    hit = (tokens["kind"].to_numpy() == "word") & (tokens["word"].str.lower().to_numpy() == word)
    counts = np.bincount(np.asarray(assignments)[hit], minlength=1)
    ks = np.flatnonzero(counts)
    out = pd.DataFrame({"concept": ks, "count": counts[ks]})
    return out.sort_values(["count", "concept"], ascending=[False, True], ignore_index=True)


def sentence_words(tokens: pd.DataFrame, text_id: int) -> pd.DataFrame:
    """The word rows of one text in the token table, in word order (their index: store rows)."""
    return tokens[(tokens["text_id"] == text_id) & (tokens["kind"] == "word")].sort_values("word_index")


def member_contexts(texts: pd.DataFrame, tokens: pd.DataFrame, assignments: np.ndarray, k: int, n: int = 20,
                    seed: int = 0) -> pd.DataFrame:
    """Up to `n` member words of concept k (seeded sample) in their sentences: text_id,
    word_index, word, text, start, end (the word's span in the text; -1 when not found)."""
    rows = np.flatnonzero((np.asarray(assignments) == k) & (tokens["kind"].to_numpy() == "word"))
    if len(rows) > n:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=n, replace=False))
    text_of = texts.set_index("text_id")["text"]
    recs = []
    for r in rows:
        tid, wi, word = int(tokens.at[r, "text_id"]), int(tokens.at[r, "word_index"]), tokens.at[r, "word"]
        same = sentence_words(tokens, tid)
        text = text_of[tid]
        span = word_spans(text, same["word"].tolist())[wi] if wi < len(same) else None
        s, e = span if span else (-1, -1)
        recs.append({"text_id": tid, "word_index": wi, "word": word, "text": text, "start": s, "end": e})
    return pd.DataFrame(recs, columns=["text_id", "word_index", "word", "text", "start", "end"])


def prediction_examples(texts: pd.DataFrame, summary_row, n: int = 6) -> list[str]:
    """Sentences whose prediction representation belongs to the concept (from its examples)."""
    ids = [int(t) for t, wi in json.loads(summary_row["examples"]) if int(wi) < 0][:n]
    text_of = texts.set_index("text_id")["text"]
    return [text_of[t] for t in ids if t in text_of.index]


def is_prediction_concept(summary_row) -> bool:
    """A concept whose members are mostly prediction rows (shown by sentences, not words)."""
    return int(summary_row["n_pred"]) * 2 > int(summary_row["size"])


def word_share(summary_row) -> float:
    """The share of word rows among a concept's train members (1 - n_pred / size); NaN for a
    concept without train members."""
    size = int(summary_row["size"])
    return 1.0 - int(summary_row["n_pred"]) / size if size else float("nan")


def percent(share: float) -> str:
    """A share as a whole percentage rounded down: 686 words of 689 members are 99%, not all."""
    return f"{math.floor(share * 100 + 1e-9)}%"


def nearest_prediction_members(texts: pd.DataFrame, tokens: pd.DataFrame, store, cs, k: int, n: int = 5,
                               batch_size: int = 8192) -> dict:
    """How concept k shows a prediction: the `n` train prediction rows assigned to it whose store
    vector is nearest (Euclidean) to its concept vector, nearest first, as {"text_ids", "texts",
    "distances"}, with its train members' "size" and "word_share" (see `word_share`). Dev and
    test rows are never shown. The store is streamed, so memory is bounded by one batch."""
    import torch

    from .concepts import train_mask

    k = int(k)
    mine = (np.asarray(cs.assignments) == k) & (tokens["kind"].to_numpy() == "pred")
    rows = np.flatnonzero(mine & train_mask(tokens, len(tokens)))
    centre = torch.as_tensor(np.asarray(cs.vectors[k], dtype=np.float32))
    dist = torch.cat([torch.linalg.vector_norm(x - centre, dim=1)  # (N,) in row order
                      for x in store.iter_batches(batch_size, shuffle=False, rows=rows)] or [torch.zeros(0)]).numpy()
    near = np.argsort(dist, kind="stable")[:n]  # ties: the earlier row first
    ids = [int(t) for t in tokens["text_id"].to_numpy()[rows[near]]]
    text_of = texts.set_index("text_id")["text"]
    row = cs.summary.loc[k]
    return {"text_ids": ids, "texts": [str(text_of[t]) for t in ids], "distances": dist[near].tolist(),
            "size": int(row["size"]), "word_share": word_share(row)}


def mostly_words_message(cs, k: int) -> str | None:
    """One sentence saying that the prediction representation falls into a concept made mostly
    of word rows, so its words name the prediction poorly; None when they are not most of it."""
    row = cs.summary.loc[int(k)]
    share = word_share(row)
    if not share > 0.5:  # NaN (no train members) says nothing either
        return None
    name = cs.labels.name(int(k)) if cs.labels is not None else None
    concept = f"c{int(k)} ({name})" if name else f"c{int(k)}"
    return (f"The prediction representation falls into {concept}, a concept made mostly of word rows "
            f"({percent(share)} of its {int(row['size']):,} train members are words), so it names the "
            "prediction poorly.")


def page_count(n_items: int, per_page: int) -> int:
    """Pages needed to show `n_items` at `per_page` a page; at least one (an empty grid is a page)."""
    return max(1, -(-int(n_items) // int(per_page)))


def paginate(ids: list, page: int, per_page: int) -> tuple[list, int]:
    """The ids on page `page` (1-based; a page out of range shows the nearest one) and the number
    of pages."""
    n_pages = page_count(len(ids), per_page)
    page = min(max(int(page), 1), n_pages)
    return list(ids[(page - 1) * per_page : page * per_page]), n_pages


def class_distribution(summary_row) -> pd.DataFrame:
    """class, count of a concept's members, from its summary row."""
    counts = json.loads(summary_row["class_counts"])
    return pd.DataFrame({"class": list(counts), "count": list(counts.values())})


def cost_table(measures: dict) -> pd.DataFrame:
    """One row per method of the evaluation's measures: fit time, peak memory, fit rows,
    codebook use (perplexity, dead codes, mean purity) and how the test split's prediction
    representations fall into concepts (distinct concepts, their purity, the largest one's
    share); a measure a method lacks is missing."""
    rows = [{"method": m, **{k: v.get(k) for k in COST_COLUMNS[1:]}} for m, v in measures.get("methods", {}).items()]
    return pd.DataFrame(rows, columns=COST_COLUMNS)


# --- the explanation side ----------------------------------------------------------------------

def shown_concepts(explanation: dict, method: str, n_prediction: int = 1) -> list[dict]:
    """The concepts an explanation puts forward for one method, each once: the prediction
    representation's top `n_prediction` concepts, then the salient words' concepts.
    Each: {"concept", "label", "why"}."""
    m = explanation["methods"][method]
    out: dict[int, dict] = {}
    for c in m["prediction_concepts"][:n_prediction]:
        out[c["concept"]] = {"concept": c["concept"], "label": c["label"],
                             "why": f"prediction concept (p = {c['probability']:.2f})"}
    for s in explanation["salient"]:
        c = s["concepts"][method]
        if c["concept"] in out:
            out[c["concept"]]["why"] += f"; salient word '{s['word']}'"
        else:
            out[c["concept"]] = {"concept": c["concept"], "label": c["label"], "why": f"salient word '{s['word']}'"}
    return list(out.values())


def relabel(explanation: dict, label_of: dict) -> dict:
    """`explanation` with each concept's label as `label_of[method](k)` gives it now: a stored or
    cached explanation keeps the labels of when it was computed, and a label may have been written
    or edited since. Methods without an entry in `label_of` keep theirs."""
    methods = {}
    for m, body in explanation["methods"].items():
        name = label_of.get(m)
        methods[m] = body if name is None else {
            **body, "prediction_concepts": [{**c, "label": name(c["concept"])} for c in body["prediction_concepts"]]}
    salient = [{**s, "concepts": {m: ({**c, "label": label_of[m](c["concept"])} if m in label_of else c)
                                  for m, c in s["concepts"].items()}} for s in explanation["salient"]]
    return {**explanation, "methods": methods, "salient": salient}


def word_labels(explanation: dict, method: str, label_of) -> dict[int, str]:
    """Concept id -> label for every concept of the input's words (`label_of(k)` names one)."""
    return {k: label_of(k) for k in set(explanation["methods"][method]["word_concepts"])}


PROVENANCE = ("run", "model", "layer", "method", "seed")  # what a figure in a paper must say it shows


def provenance(run, method: str) -> dict:
    """Where an explanation comes from: the run's name, model, layer and seed, and the method."""
    return {"run": run.dir.name, "model": run.cfg.extract.model, "layer": int(run.layer), "method": method,
            "seed": int(run.cfg.seed)}


def make_pin(explainer, text: str, method: str, n_prediction: int = 1, *, source: dict | None = None) -> dict:
    """A case-study record of one input under one method: its provenance (`source`, see
    `provenance`), the prediction, every word with its concept, and each shown concept with the
    effect of ablating it alone (delta = new minus old probability of the predicted class).
    Plain data, ready for `report`."""
    ex = explainer.explain(text).to_dict()
    concepts = explainer.methods[method][1]
    shown = []
    for c in shown_concepts(ex, method, n_prediction):
        r = explainer.ablate_concepts(text, method, [c["concept"]])
        shown.append({**c, "delta": r["delta"], "new_prediction": r["prediction"], "new_confidence": r["confidence"]})
    ids = ex["methods"][method]["word_concepts"]
    return {**(source or {}), "text": text, "method": method, "prediction": ex["prediction"],
            "confidence": ex["confidence"], "words": [{**w, "concept": int(k)} for w, k in zip(ex["words"], ids)],
            "labels": {int(k): concepts.label(int(k)) for k in set(ids) | {c["concept"] for c in shown}},
            "concepts": shown}


def relabel_pin(pin: dict, label_of) -> dict:
    """`pin` with its concepts named as `label_of(k)` names them now (a label written or edited
    after the pin was made shows in the case study and its exports)."""
    return {**pin, "labels": {int(k): label_of(int(k)) for k in pin.get("labels", {})},
            "concepts": [{**c, "label": label_of(int(c["concept"]))} for c in pin.get("concepts", [])]}


def find_pin(pins: list[dict], run: str, method: str, text: str) -> int | None:
    """The index of the pin of `text` under `method` from run `run` in `pins`, or None: the same
    input is pinned once per run and method."""
    return next((i for i, p in enumerate(pins) if (p.get("run"), p["method"], p["text"]) == (run, method, text)), None)


# --- runs --------------------------------------------------------------------------------------

def build_command(cfg) -> str:
    """The `vqlc build` command line that builds, or finishes, a run with configuration `cfg`
    (a `BuildConfig`, e.g. `Run.rebuild_config()`): the preset nearest to it, the run's name,
    each option that differs from that preset, and the cache folder when it is not ./cache."""
    from .config import PRESETS, SECTIONS, flag_of

    want = cfg.flat()
    options = {"seed"} | {f.name for s in SECTIONS.values() for f in fields(s) if f.metadata.get("cli", True)}

    def differ(name: str) -> list[str]:
        have = PRESETS[name].flat()
        return [k for k in want if k in options and want[k] != have.get(k) and want[k] is not None]

    preset = min(PRESETS, key=lambda name: (len(differ(name)), name != "default"))
    words = ["vqlc", "build"] + (["--preset", preset] if preset != "default" else []) + ["--run", cfg.run]
    for key in differ(preset):
        value = want[key]
        words += [flag_of(key), *(map(str, value) if isinstance(value, list) else [str(value)])]
    if str(cfg.cache_dir) != "cache":
        words += ["--cache-dir", str(cfg.cache_dir)]
    return " ".join(shlex.quote(w) for w in words)


def precompute_clouds(run, method: str, n: int | None = None) -> int:
    """Draw and store the word clouds of `method`'s concepts (those with words, the first `n` in
    the Concepts grid's order; all when None), so no page draws one on a first visit. Returns how
    many were drawn now (a cloud already stored is kept). Meant for the build's `maps` stage."""
    from .wordclouds import cloud_path, concept_cloud

    summary = run.concept_set(method).summary
    drawn = 0
    for k in [int(k) for k in summary.loc[summary["size"] > 0, "concept"]][:n]:
        words = summary.at[k, "top_words"]
        if not cloud_path(run.dir, method, k, words).exists():
            drawn += concept_cloud(run.dir, method, k, words) is not None
    return drawn


# The example the Explain and Compare pages open with. The build explains it once (stage maps) and
# stores the explanation, so a first visit shows it without waiting for the model to load.
EXAMPLE = "a gorgeous, witty and deeply moving film, though its final act drags on far too long ."
EXAMPLE_FILE = "ui/example_explanation.json"


def precompute_example(run, text: str = EXAMPLE) -> dict:
    """Explain `text` with every built method, store the explanation in the run (`EXAMPLE_FILE`)
    and draw the word clouds of the concepts it shows. Meant for the build's `maps` stage."""
    from .runio import write_json
    from .wordclouds import concept_cloud

    methods = run.methods_built()
    ex = run.explainer({m: (run.method(m), run.concept_set(m)) for m in methods}).explain(text).to_dict()
    write_json(run.dir / EXAMPLE_FILE, {"text": text, "explanation": ex})
    for m in methods:
        summary = run.concept_set(m).summary
        for c in shown_concepts(ex, m):
            concept_cloud(run.dir, m, c["concept"], summary.at[c["concept"], "top_words"])
    return ex


def precomputed_explanation(run_dir, text: str) -> dict | None:
    """The explanation of `text` the build stored in the run, if it stored one of this very text."""
    from pathlib import Path

    from .runio import read_json

    path = Path(run_dir) / EXAMPLE_FILE
    try:
        stored = read_json(path) if path.exists() else None
    except Exception:  # an unreadable file is only a missed shortcut: the page explains live
        return None
    return stored["explanation"] if isinstance(stored, dict) and stored.get("text") == text else None


def unfinished_message(run, stage: str) -> str:
    """What the dashboard says of a run that lacks a finished `stage`: the command that finishes
    it with the run's own settings (a run with no finished stage yet may take other ones)."""
    cmd = build_command(run.rebuild_config())
    if not any(v.get("state") == "complete" for v in run.manifest.data["stages"].values()):
        return (f"Run '{run.dir.name}' has no finished stage yet: its first build stopped early. Build it with "
                f"`{cmd}`, changing what made it stop, or choose another run.")
    return (f"Run '{run.dir.name}' has no finished '{stage}' stage yet; finish it with `{cmd}` or choose "
            "another run.")
