"""The additive picture of one method's explanation, as SHAP draws one: a waterfall from p(predicted
class) with every word concept of the input removed (the base), through one bar per concept (its
score: its single local ablation's drop, or its Shapley value), the rest grouped as one bar and
the interaction (the joint drop minus the sum of the scores), to p(x); so the bars add up to the
prediction exactly. And SHAP's text plot: each word coloured red or blue by its concept's score.

Both read a method's explanation as the pages hold it (`MethodExplanation.to_dict()`) or the
record itself.
"""

from __future__ import annotations

import html
from dataclasses import asdict, is_dataclass

import plotly.graph_objects as go

# SHAP's colours: red pushes toward the predicted class, blue away from it.
SUPPORTS, OPPOSES, TOTAL = "#ff0051", "#008bfb", "#9e9e9e"
TOP = 8  # concepts drawn with a bar of their own; the rest share one
INTERACTION = "interaction"


def _record(m) -> dict:
    return asdict(m) if is_dataclass(m) else dict(m)


def word_contributions(m) -> list[dict]:
    """The input's word concepts of a method's explanation, as ranked there (the prediction
    concept, which an older record lists too, left out: it is no part of the input)."""
    return [c for c in (_record(m).get("contributions") or []) if c.get("kind", "word") != "prediction"]


def base_value(m, confidence: float) -> float:
    """p(predicted class) with every word concept of the input removed together: the record's
    `base`, or for a record without one p(x) minus its joint drop."""
    m = _record(m)
    return float(m["base"]) if m.get("base") is not None else float(confidence) - float(m["joint"])


def waterfall_bars(m, confidence: float, top: int = TOP, name_of=None) -> list[dict]:
    """The bars of the waterfall, in the order drawn: the base ("absolute"), the `top` concepts
    by |score| (then the others as one bar, then the interaction; "relative") and p(x)
    ("total"). Each bar: {"name", "value", "measure", "stderr", "hover", "concept"}; the
    relative values add up to p(x) minus the base. `name_of(c)` names a concept's bar (default:
    its label)."""
    m = _record(m)
    contribs = word_contributions(m)
    base = base_value(m, confidence)
    joint = float(confidence) - base
    name_of = name_of or (lambda c: c["label"])
    ranked = sorted(contribs, key=lambda c: -abs(float(c["score"])))
    shown, rest = ranked[:top], ranked[top:]
    bars = [{"name": "every word concept removed", "value": base, "measure": "absolute", "stderr": 0.0,
             "hover": "p with every word concept of the input removed together", "concept": None}]
    for c in shown:
        bars.append({"name": name_of(c), "value": float(c["score"]), "measure": "relative",
                     "stderr": float(c.get("stderr") or 0.0), "hover": c["label"], "concept": int(c["concept"])})
    if rest:
        bars.append({"name": f"{len(rest)} other concept{'s' if len(rest) > 1 else ''}",
                     "value": sum(float(c["score"]) for c in rest), "measure": "relative", "stderr": 0.0,
                     "hover": "; ".join(c["label"] for c in rest), "concept": None})
    bars.append({"name": INTERACTION, "value": joint - sum(float(c["score"]) for c in contribs),
                 "measure": "relative", "stderr": 0.0,
                 "hover": "the joint drop minus the sum of the scores: what the concepts do only together",
                 "concept": None})
    bars.append({"name": "prediction", "value": float(confidence), "measure": "total", "stderr": 0.0,
                 "hover": "p(predicted class) of the input as it is", "concept": None})
    return bars


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def waterfall_figure(m, confidence: float, prediction: str, top: int = TOP, name_of=None, height: int | None = None,
                     label_width: int = 42) -> go.Figure:
    """The waterfall of `waterfall_bars` (horizontal, read top to bottom: from the base to
    p(`prediction`)), each concept's bar red where it supports the prediction and blue where it
    opposes it, its value written on it (with ± its standard error where Shapley values were
    sampled), its full name on hover."""
    bars = waterfall_bars(m, confidence, top, name_of)
    names, seen = [], set()
    for b in bars:  # plotly merges bars of one name; a name cut short could repeat
        n = _short(b["name"], label_width)
        while n in seen:
            n += " "
        seen.add(n)
        names.append(n)
    # the base and p(x) read on the axis: their bars run on past its left edge (`zoomed_range`)
    names[0], names[-1] = f"all concepts removed {bars[0]['value']:.3f}", f"p({prediction}) {bars[-1]['value']:.3f}"
    text = ["" if b["measure"] != "relative" else
            f"{b['value']:+.3f}" + (f" ± {b['stderr']:.3f}" if b["stderr"] > 0 else "") for b in bars]
    fig = go.Figure(go.Waterfall(
        orientation="h", measure=[b["measure"] for b in bars], y=names, x=[b["value"] for b in bars],
        text=text, textposition="auto", cliponaxis=False, customdata=[html.escape(b["hover"]) for b in bars],
        hovertemplate="%{customdata}<br>%{x:+.3f}<extra></extra>",
        increasing={"marker": {"color": SUPPORTS}}, decreasing={"marker": {"color": OPPOSES}},
        totals={"marker": {"color": TOTAL}}, connector={"line": {"color": "#bbbbbb", "width": 1}}))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text=f"p({prediction})", range=zoomed_range(bars))
    return fig.update_layout(height=height or 90 + 28 * len(bars), margin={"l": 10, "r": 40, "t": 10, "b": 40},
                             showlegend=False)


def zoomed_range(bars: list[dict], pad: float = 0.12, least: float = 0.02) -> list[float]:
    """The x range a waterfall is drawn over, as SHAP draws one: the span its running total
    covers (from the base to p(x)), widened by `pad` of it on each side (at least `least` wide),
    so small bars stay readable; the base and p(x) bars run on past its left edge."""
    at, path = 0.0, []
    for b in bars:
        at = b["value"] if b["measure"] != "relative" else at + b["value"]
        path.append(at)
    lo, hi = min(path), max(path)
    span = max(hi - lo, least)
    return [max(lo - pad * span, 0.0) if lo >= 0 else lo - pad * span, hi + pad * span]


def bars_total(fig: go.Figure) -> float:
    """Where a waterfall of `waterfall_figure` ends: its base plus its relative bars."""
    t = fig.data[0]
    return float(sum(x for x, how in zip(t.x, t.measure) if how in ("absolute", "relative")))


def score_color(score: float, scale: float) -> str:
    """A diverging colour for a score: red for positive, blue for negative, its opacity growing
    with |score| / scale (transparent for 0)."""
    a = 0.0 if scale <= 0 else min(abs(float(score)) / scale, 1.0)
    r, g, b = (255, 0, 81) if score >= 0 else (0, 139, 251)
    return f"rgba({r},{g},{b},{0.85 * a:.3f})"


def score_sentence_html(text: str, words: list[dict], concept_ids: list[int], contributions: list[dict],
                        labels: dict[int, str] | None = None) -> str:
    """The input with every word coloured by its concept's score (SHAP's text plot: red supports
    the prediction, blue opposes it, stronger for a larger |score|), the concept and its score
    on hover and as a small number under the word. Text between words is kept; all text escaped."""
    score = {int(c["concept"]): float(c["score"]) for c in contributions}
    scale = max((abs(v) for v in score.values()), default=0.0)
    labels = labels or {}
    e, out, pos = html.escape, [], 0
    for w, k in zip(words, concept_ids):
        s, t = int(w["start"]), int(w["end"])
        out.append(e(text[pos:s]))
        v = score.get(int(k))
        name = labels.get(int(k), f"c{k}")
        title = e(f"{name}: {v:+.3f}" if v is not None else name, quote=True)
        bg = score_color(v, scale) if v is not None else "transparent"
        mark = f"{v:+.2f}" if v is not None else ""
        out.append(f'<span title="{title}" style="background:{bg};padding:1px 3px;border-radius:3px;'
                   f'line-height:2">{e(text[s:t])}<sub style="opacity:.6">{mark}</sub></span>')
        pos = t
    out.append(e(text[pos:]))
    return "".join(out)
