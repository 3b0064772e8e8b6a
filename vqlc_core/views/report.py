"""Case-study exports for a paper: figures (PNG, SVG), tables (CSV, LaTeX) and a zip bundle
with a short Markdown report, made from pinned inputs (`browse.make_pin`). Every export says
where each pin comes from (run, model, layer, method, seed: `browse.PROVENANCE`). Every function
returns bytes (or text) and touches no files, so the dashboard hands them to download buttons.

A pin's effects come first as the page showed them: the concepts ablated there together, then
each shown concept alone (`effects`). Figures are drawn with matplotlib's object API (no pyplot
state), which is safe to call from the dashboard's threads; user text is drawn with mathtext off,
and an SVG keeps it as text (editable, searchable). The LaTeX table is a booktabs table for one
column of a two-column paper.
"""

from __future__ import annotations

import io
import json
import re
import zipfile

import pandas as pd

from vqlc_core.views.browse import PROVENANCE, ablated_ids, concept_color
from vqlc_core.base.runio import RunError

FORMATS = ("png", "svg")
MARGIN_IN = 0.15  # white space around every figure, in inches
_LATEX = {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
          ">": r"\textgreater{}", **{c: "\\" + c for c in "&%$#_{}"}}
EFFECT_COLUMNS = ["ablated", "label", "why", "delta", "new_prediction", "new_confidence"]
TABLE_COLUMNS = ["pin", *PROVENANCE, "text", "prediction", "confidence", *EFFECT_COLUMNS]
TOGETHER = "ablated together on the page"


def effects(pin: dict) -> list[dict]:
    """A pin's ablation effects, each {"ablated" ("c43 + c368"), "label", "why", "delta",
    "new_prediction", "new_confidence", "concepts"}: the concepts the page had ablated together
    first (when it had), then each shown concept alone."""
    together = ablated_ids(pin)
    rows = []
    if together:
        labels = pin.get("labels", {})
        rows.append({"ablated": " + ".join(f"c{k}" for k in together), "concepts": together,
                     "label": "; ".join(labels.get(k, f"c{k}") for k in together), "why": TOGETHER,
                     **{k: pin["ablated"][k] for k in ("delta", "new_prediction", "new_confidence")}})
    rows += [{"ablated": f"c{c['concept']}", "concepts": [c["concept"]],
              **{k: c[k] for k in EFFECT_COLUMNS[1:]}} for c in pin["concepts"]]
    return rows


def provenance_line(pin: dict) -> str:
    """'run default, model minilm, layer 5, method vqlc, seed 0' (what the pin records of it)."""
    return ", ".join(f"{k} {pin[k]}" for k in PROVENANCE if pin.get(k) is not None)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=150)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, fmt: str, pin: dict) -> bytes:
    """The figure as `fmt` bytes; the file's own metadata (PNG text, SVG metadata) says where the
    pin comes from, as the caption drawn in the figure does."""
    if fmt not in FORMATS:
        raise RunError(f"Unknown figure format '{fmt}'; choose one of {', '.join(FORMATS)}.")
    from matplotlib import rc_context

    buf = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):  # SVG text as <text>, not paths
        fig.savefig(buf, format=fmt, bbox_inches="tight", pad_inches=MARGIN_IN,
                    metadata={"Title": f"vqlc case study: {pin['method']}", "Description": provenance_line(pin)})
    return buf.getvalue()


def ablation_figure(pin: dict, fmt: str = "png") -> bytes:
    """Bar chart of the ablation effects on the predicted class's confidence: the concepts the
    page ablated together (top, hatched), then each shown concept alone."""
    rows = effects(pin)[::-1]  # barh draws bottom up
    fig = _figure(6.0, 0.5 + 0.4 * max(len(rows), 1))
    ax = fig.add_subplot()
    bars = ax.barh(range(len(rows)), [r["delta"] for r in rows], edgecolor="#444",
                   color=[concept_color(r["concepts"][0]) if len(r["concepts"]) == 1 else "#dddddd" for r in rows])
    for bar, r in zip(bars, rows):
        if r["why"] == TOGETHER:
            bar.set_hatch("//")
    ax.set_yticks(range(len(rows)), [f"{r['ablated']} together" if r["why"] == TOGETHER else r["label"]
                                     for r in rows], fontsize=8)
    for t in ax.get_yticklabels():
        t.set_parse_math(False)
    ax.axvline(0, color="#444", linewidth=0.8)
    ax.set_xlabel(f"Δ confidence of '{pin['prediction']}' when ablated", parse_math=False)
    ax.set_title(f"{pin['method']}: concept ablation", parse_math=False)
    # The footer starts under the tick labels' left edge (a figure fraction would follow the
    # saved image's own edge once it is cropped to its content).
    left = ax.get_tightbbox(fig.canvas.get_renderer()).x0
    ax.annotate(provenance_line(pin), xy=((left - ax.bbox.x0) / ax.bbox.width, 0),
                xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -4), textcoords="offset points", fontsize=6,
                color="#555", va="top", annotation_clip=False, parse_math=False)
    return _save(fig, fmt, pin)


def sentence_figure(pin: dict, fmt: str = "png", width_px: int = 900) -> bytes:
    """The input with every word on a box coloured by its concept (concept id below), wrapped."""
    fig = _figure(width_px / 150, 1.0)
    renderer = fig.canvas.get_renderer()
    x, line, pad, placed = 0.0, 0, 6.0, []
    for w in pin["words"]:
        t = fig.text(0, 0, w["word"], fontsize=11, parse_math=False,
                     bbox={"facecolor": concept_color(w["concept"]), "edgecolor": "none", "boxstyle": "round,pad=0.25"})
        wpx = t.get_window_extent(renderer).width + 2 * pad
        if x > 0 and x + wpx > width_px:
            x, line = 0.0, line + 1
        placed.append((t, x, line, w["concept"]))
        x += wpx
    n_lines = line + 1
    fig.set_size_inches(width_px / 150, 0.45 * n_lines + 0.3)
    H = fig.get_size_inches()[1] * 150
    for t, px, ln, k in placed:
        y = 1 - (ln * 0.45 * 150 + 20) / H
        t.set_position((px / width_px, y))
        fig.text(px / width_px, y - 14 / H, str(k), fontsize=6, color="#555")
    fig.text(0, 1 + 8 / H, f"{pin['method']} — prediction {pin['prediction']} ({pin['confidence']:.2f})",
             fontsize=9, parse_math=False)
    fig.text(0, 1 - ((n_lines - 1) * 0.45 * 150 + 44) / H, provenance_line(pin), fontsize=6, color="#555",
             parse_math=False, va="top")
    return _save(fig, fmt, pin)


def pins_table(pins: list[dict]) -> pd.DataFrame:
    """One row per (pin, effect): where the pin comes from, its input and prediction, what was
    ablated and its effect; the page's concepts ablated together first (see `effects`)."""
    rows = [{"pin": i + 1, **{k: p.get(k) for k in PROVENANCE}, "text": p["text"], "prediction": p["prediction"],
             "confidence": p["confidence"], **{k: e[k] for k in EFFECT_COLUMNS}}
            for i, p in enumerate(pins) for e in effects(p)]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def table_csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode()


def latex_escape(text: str) -> str:
    """`text` with LaTeX's special characters escaped."""
    return re.sub(r"[\\&%$#_{}~^<>]", lambda m: _LATEX[m.group()], text)


# One column of a two-column paper: the concept's label and why it is shown wrap, the numbers do not.
_RAGGED = r">{\raggedright\arraybackslash}"
_LATEX_COLUMNS = rf"@{{}}{_RAGGED}X{_RAGGED}Xr{_RAGGED}p{{0.2\columnwidth}}@{{}}"
_LATEX_HEAD = r"Concept(s) ablated & Why & $\Delta$ conf. & New prediction \\"


def _named(row) -> str:
    """The label of a table row, led by its concept id when the label does not say it."""
    return row.label if str(row.label).startswith(row.ablated.split(" ")[0] + ":") else f"{row.ablated}: {row.label}"


def table_latex(df: pd.DataFrame, caption: str | None = None) -> bytes:
    """`df` (as `pins_table` makes it) as a booktabs table that fits one column of a two-column
    paper (it needs \\usepackage{booktabs,tabularx}): four columns (concept, why, Δ confidence, new
    prediction), each pin's sentence, prediction and provenance once, in a row across the table,
    then its ablation effects, the page's concepts ablated together first. Text is escaped, the
    caption too."""
    e = latex_escape
    caption = e(caption or "Concepts of the pinned inputs and the effect of ablating them.")
    lines = [r"% vqlc case study: needs \usepackage{booktabs,tabularx}", r"\begin{table}[t]", r"\centering\small",
             r"\setlength{\tabcolsep}{4pt}", rf"\caption{{{caption}}}", r"\label{tab:case-study}",
             rf"\begin{{tabularx}}{{\columnwidth}}{{{_LATEX_COLUMNS}}}", r"\toprule", _LATEX_HEAD]
    for pin, rows in df.groupby("pin", sort=True):
        first = rows.iloc[0]
        source = provenance_line({k: first[k] for k in PROVENANCE if pd.notna(first[k])})
        head = (rf"\textbf{{Pin {pin}}}: ``{e(str(first['text']))}'' $\rightarrow$ {e(str(first['prediction']))} "
                rf"({first['confidence']:.3f}). \emph{{{e(source)}.}}")
        lines += [r"\midrule", rf"\multicolumn{{4}}{{@{{}}{_RAGGED}p{{\columnwidth}}@{{}}}}{{{head}}} \\"]
        lines += [" & ".join([e(_named(r)), e(str(r.why)), f"${r.delta:+.3f}$",
                              f"{e(str(r.new_prediction))} ({r.new_confidence:.3f})"]) + r" \\"
                  for r in rows.itertuples()]
    lines += [r"\bottomrule", r"\end{tabularx}", r"\end{table}", ""]
    return "\n".join(lines).encode()


def markdown_report(pins: list[dict], figures: dict[int, list[str]] | None = None) -> str:
    """A short Markdown report: per pin where it comes from, its input, prediction and concepts
    with ablation effects, their linguistic tags (pins made on a run with tags), and its figures, each with a caption that says where it comes from."""
    lines = ["# Case study", "", f"{len(pins)} pinned input(s).", ""]
    for i, p in enumerate(pins, 1):
        lines += [f"## Pin {i} ({p['method']})", "", f"From: {provenance_line(p)}.", "", f"> {p['text']}", "",
                  f"Prediction: **{p['prediction']}** (confidence {p['confidence']:.3f})", "",
                  "| ablated | label | why | Δ confidence | new prediction |", "|---|---|---|---|---|"]
        for c in effects(p):
            cells = [c["ablated"], c["label"], c["why"], f"{c['delta']:+.3f}",
                     f"{c['new_prediction']} ({c['new_confidence']:.3f})"]
            lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
        lines.append("")
        tags = {int(k): v for k, v in (p.get("tags") or {}).items()}
        if tags:
            lines += ["Linguistic tags (share of the concept's train members; ✓ aligned):", ""]
            lines += [f"- c{k}: {v}" for k, v in sorted(tags.items())] + [""]
        for f in (figures or {}).get(i, []):
            kind = f.rsplit("_", 1)[-1].split(".")[0]  # figures/pin1_ablation.png -> ablation
            lines += [f"![{f}]({f})", "", f"*Pin {i}, {kind} figure: {provenance_line(p)}.*", ""]
    return "\n".join(lines)


def bundle(pins: list[dict]) -> bytes:
    """A zip of report.md, the table (CSV, LaTeX), each pin's figures (PNG, SVG) and pins.json."""
    buf = io.BytesIO()
    table = pins_table(pins)
    figures: dict[int, list[str]] = {}
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for i, p in enumerate(pins, 1):
            for name, draw in (("ablation", ablation_figure), ("sentence", sentence_figure)):
                for fmt in FORMATS:
                    path = f"figures/pin{i}_{name}.{fmt}"
                    z.writestr(path, draw(p, fmt))
                figures.setdefault(i, []).append(f"figures/pin{i}_{name}.png")
        z.writestr("concepts.csv", table_csv(table))
        runs = "; ".join(dict.fromkeys(provenance_line({**p, "method": None}) for p in pins))
        z.writestr("concepts.tex", table_latex(table, caption=f"Concepts of the pinned inputs ({runs})."))
        z.writestr("pins.json", json.dumps(pins, indent=2, default=str))
        z.writestr("report.md", markdown_report(pins, figures))
    return buf.getvalue()
