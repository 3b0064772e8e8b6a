"""What the dashboard shows, as plain data: a stable colour per concept, the sentences that show
a prediction concept (its nearest train prediction rows), pages of a concept grid, the concepts
an explanation puts forward, HTML for a sentence whose words are coloured by concept, the
methods' cost table, case-study pins, and what the build precomputes for the pages.

Every piece of text that reaches HTML here goes through `html.escape`; the pages only render.
"""

from __future__ import annotations

import colorsys
import logging
import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from vqlc_core.evaluate.faithfulness import PREDICTION
from vqlc_core.methods.calibration import WHAT as PROBABILITY_MEANS
from vqlc_core.methods.concepts import is_prediction_concept, word_share
from vqlc_core.base.runio import read_json, write_json
from vqlc_core.methods.concepts import train_mask
from vqlc_core.views.wordclouds import cloud_path, concept_cloud

log = logging.getLogger(__name__)
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


def prediction_controls(run, method: str) -> pd.DataFrame:
    """What a method's prediction concept adds beyond its controls on the test set, from the
    evaluate stage's matched table: per control (the matched concept, the matched direction,
    the class direction) the concept's confidence drop minus the control's, and the flip rate's
    difference, each with its 95% interval as text ('0.012 [−0.004, 0.027]'). Empty for a run
    without the table."""
    path = run.dir / "eval" / "matched.parquet"
    df = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    if df.empty:
        return pd.DataFrame()
    df = df[(df["method"] == method) & (df["target"] == PREDICTION)]

    def interval(m, lo, hi) -> str:
        return f"{m:.3f} [{lo:.3f}, {hi:.3f}]".replace("-", "−")

    return pd.DataFrame({
        "minus control": df["control"].str.split(": ").str[-1].to_list(),
        "Δ confidence drop [95% CI]": [interval(*r) for r in zip(df["diff_conf_drop"], df["diff_conf_drop_low"],
                                                                  df["diff_conf_drop_high"])],
        "Δ flip rate [95% CI]": [interval(*r) for r in zip(df["diff_flip_rate"], df["diff_flip_rate_low"],
                                                            df["diff_flip_rate_high"])],
    })


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


def words_markdown(cs, k: int, n: int = 15) -> str:
    """Concept k's words as Markdown (text escaped): its distinctive words (class-based TF-IDF,
    `naming`), for a concept with prediction members the distinctive words of their sentences,
    and its top words with their counts, which the name does not use but which stay in view."""
    lines = []
    sentence = ", ".join(w for w, _ in cs.sentence_words(k, n))
    if sentence:
        lines.append(f"**Distinctive words of its sentences**: {html.escape(sentence)}")
    distinct = ", ".join(w for w, _ in cs.distinctive_words(k, n)) if int(cs.summary.at[k, "size"]) else ""
    if distinct and not is_prediction_concept(cs.summary.loc[k]):
        lines.append(f"**Distinctive words** (class-based TF-IDF): {html.escape(distinct)}")
    top = ", ".join(f"{w} ({c})" for w, c in cs.top_words(k, n)) or "none (prediction rows only)"
    lines.append(f"**Top words** (by count): {html.escape(top)}")
    return "  \n".join(lines)


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

# What the number beside a prediction concept is, in the pages' help.
PROBABILITY_HELP = (f"neighbour share: the method's probability for the prediction concept, {PROBABILITY_MEANS} "
                    "(its own probabilities tempered on the dev split; the reliability table is in `vqlc report`). It "
                    "says how tightly the method groups this prediction with its neighbours, not how much the concept "
                    "carries the prediction: the ranked list above says that.")
NEIGHBOUR_SHARE = "neighbour share"  # the column and card name of that number

def shown_concepts(explanation: dict, method: str, n_prediction: int = 1) -> list[dict]:
    """The concepts an explanation puts forward for one method, each once: the prediction
    representation's top `n_prediction` concepts, then the salient words' concepts.
    Each: {"concept", "label", "why"}."""
    m = explanation["methods"][method]
    out: dict[int, dict] = {}
    for c in m["prediction_concepts"][:n_prediction]:
        out[c["concept"]] = {"concept": c["concept"], "label": c["label"],
                             "why": f"prediction concept ({NEIGHBOUR_SHARE} {c['probability']:.2f})"}
    for s in explanation["salient"]:
        c = s["concepts"][method]
        if c["concept"] in out:
            out[c["concept"]]["why"] += f"; salient word '{s['word']}'"
        else:
            out[c["concept"]] = {"concept": c["concept"], "label": c["label"], "why": f"salient word '{s['word']}'"}
    return list(out.values())


def relabel(explanation: dict, label_of: dict) -> dict:
    """`explanation` with each concept's label as `label_of[method](k)` gives it now (its prediction
    concepts, its concept attribution's list and its salient words' concepts): a stored or cached
    explanation keeps the labels of when it was computed, and a label may have been written or
    edited since. Methods without an entry in `label_of` keep theirs."""
    methods = {}
    for m, body in explanation["methods"].items():
        name = label_of.get(m)
        methods[m] = body if name is None else {
            **body, "prediction_concepts": [{**c, "label": name(c["concept"])} for c in body["prediction_concepts"]],
            **({"contributions": [{**c, "label": name(c["concept"])} for c in body["contributions"]]}
               if "contributions" in body else {})}
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


def make_pin(explainer, text: str, method: str, n_prediction: int = 1, *, source: dict | None = None,
             ablated=()) -> dict:
    """A case-study record of one input under one method as the page showed it: its provenance
    (`source`, see `provenance`), the prediction, every word with its concept, the concepts
    `ablated` on the page together with the prediction they gave ("ablated": {"concepts",
    "delta", "new_prediction", "new_confidence"}, None when none were), and each shown concept
    with the effect of ablating it alone (delta = new minus old probability of the predicted
    class). Plain data, ready for `report`."""
    ex = explainer.explain(text).to_dict()
    concepts = explainer.methods[method][1]
    shown = shown_concepts(ex, method, n_prediction)
    together = sorted({int(k) for k in ablated})
    # one forward for them all: each shown concept alone, then the page's set together
    asks = [(text, method, [c["concept"]]) for c in shown] + ([(text, method, together)] if together else [])
    results = explainer.ablate_many(asks) if asks else []
    effect = [{"delta": r.delta, "new_prediction": r.prediction, "new_confidence": r.confidence} for r in results]
    ids = ex["methods"][method]["word_concepts"]
    return {**(source or {}), "text": text, "method": method, "prediction": ex["prediction"],
            "confidence": ex["confidence"], "words": [{**w, "concept": int(k)} for w, k in zip(ex["words"], ids)],
            "labels": {int(k): concepts.label(int(k))
                       for k in set(ids) | {c["concept"] for c in shown} | set(together)},
            "ablated": {"concepts": together, **effect[-1]} if together else None,
            "concepts": [{**c, **e} for c, e in zip(shown, effect)]}


def ablated_ids(pin: dict) -> list[int]:
    """The concepts a pin's page had ablated together; none for a pin made before pins kept them."""
    return list((pin.get("ablated") or {}).get("concepts", []))


def relabel_pin(pin: dict, label_of) -> dict:
    """`pin` with its concepts named as `label_of(k)` names them now (a label written or edited
    after the pin was made shows in the case study and its exports)."""
    return {**pin, "labels": {int(k): label_of(int(k)) for k in {*pin.get("labels", {}), *ablated_ids(pin)}},
            "concepts": [{**c, "label": label_of(int(c["concept"]))} for c in pin.get("concepts", [])]}


def find_pin(pins: list[dict], run: str, method: str, text: str, ablated=()) -> int | None:
    """The index of the pin of `text` under `method` from run `run` with the concepts `ablated`
    together in `pins`, or None: the same view of an input is pinned once per run and method."""
    key = (run, method, text, sorted(int(k) for k in ablated))
    return next((i for i, p in enumerate(pins) if (p.get("run"), p["method"], p["text"], ablated_ids(p)) == key), None)


def precompute_clouds(run, method: str, n: int | None = None) -> int:
    """Draw and store the word clouds of `method`'s concepts (those with words, the first `n` in
    the Concepts grid's order; all when None), so no page draws one on a first visit. Returns how
    many were drawn now (a cloud already stored is kept). Meant for the build's `maps` stage."""
    cs = run.concept_set(method)
    drawn = 0
    for k in cs.used_ids()[:n]:
        words = cs.cloud_words(k)
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
    methods = run.methods_built()
    ex = run.explainer(methods).explain(text).to_dict()
    write_json(run.dir / EXAMPLE_FILE, {"text": text, "explanation": ex})
    for m in methods:
        cs = run.concept_set(m)
        for c in shown_concepts(ex, m):
            concept_cloud(run.dir, m, c["concept"], cs.cloud_words(c["concept"]))
    return ex


def precomputed_explanation(run_dir, text: str) -> dict | None:
    """The explanation of `text` the build stored in the run, if it stored one of this very text."""
    path = Path(run_dir) / EXAMPLE_FILE
    try:
        stored = read_json(path) if path.exists() else None
    except Exception:  # an unreadable file is only a missed shortcut: the page explains live
        log.warning("vqlc: the stored example explanation %s is unreadable; explaining live", path, exc_info=True)
        return None
    return stored["explanation"] if isinstance(stored, dict) and stored.get("text") == text else None
