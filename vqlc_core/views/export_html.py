"""One self-contained HTML file of a method's concepts in a run, for people who do not run vqlc:
the concept grid, each concept's word cloud, label, top words, class distribution and contexts
with the member word highlighted, and the run's faithfulness table.

The file needs no server and no network: the CSS is inline, each word cloud is a palette PNG
data URI written once (in the stylesheet) and shown in the grid and in its concept's section,
there is no script, and a Content-Security-Policy forbids scripts and any outside request.
Every piece of text from the run goes through `html.escape`. `vqlc export-html` writes it;
the dashboard's Concepts page offers the same file as a download. Both show progress (concepts
drawn of all): drawing a cloud is most of the work, so each is stored in the run as the pages
store theirs (the build's maps stage draws them all), and later exports and pages read it.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Callable

from vqlc_core.views import browse
from vqlc_core.evaluate import tag_alignment
from vqlc_core.llm.labels import label_facts
from vqlc_core.base.runio import RunError, atomic_path
from vqlc_core.methods.base import display_name
from vqlc_core.views.wordclouds import concept_cloud
from vqlc_core.data.corpus import all_member_contexts
from vqlc_core.methods.concepts import is_prediction_concept, prediction_examples

N_CONTEXTS = 12  # member contexts per concept, as the dashboard's concept view shows
N_WORDS = 15  # top words listed per concept
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1280px;padding:1rem 1.5rem;
color:#222;background:#fff}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.25rem;margin:.2rem 0}h3{font-size:1rem;margin:.8rem 0 .3rem}
.meta{color:#555}table{border-collapse:collapse;font-size:13px;margin:.4rem 0}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.this td{background:#f3f7ff}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:10px}
.card{display:block;border:1px solid #ddd;border-radius:8px;padding:8px;color:inherit;text-decoration:none}
.card:hover{border-color:#4a6fd1}.card b{display:block}.card small{color:#555}
.cloud{width:100%;aspect-ratio:4/3;background:center/contain no-repeat}.concept .cloud{max-width:400px}
.concept{border-top:2px solid #eee;padding:.8rem 0;content-visibility:auto;contain-intrinsic-size:auto 640px}
.cols{display:grid;grid-template-columns:minmax(260px,2fr) 3fr;gap:1.5rem}
.bar{display:flex;align-items:center;gap:6px;margin:2px 0}.bar span{min-width:6em}
.bar i{display:block;height:12px;background:#4a6fd1;border-radius:2px}
.contexts li{margin:3px 0}mark{background:#ffe58a}.sentences{font-size:12px;color:#444}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _num(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _ci(mean, low, high) -> str:
    return f"{_num(mean)} [{_num(low)}, {_num(high)}]"


# --- what goes in -----------------------------------------------------------------------------

def choose_method(run, method: str | None) -> str:
    """`method` when the run has finished it; the run's first finished method when None."""
    built = run.methods_built()
    if not built:
        raise RunError(f"Run '{run.dir.name}' has no finished concept method yet; finish it with "
                       f"`vqlc build --run {run.dir.name}`.")
    if method is None:
        return built[0]
    if method not in built:
        raise RunError(f"Run '{run.dir.name}' has no finished method '{method}'; choose one of {', '.join(built)}.")
    return method


def choose_concepts(cs, run_name: str, concepts=None) -> list[int]:
    """The concept ids to export: `concepts` in the order given (each once), checked to exist;
    by default every concept with members, as the dashboard's grid shows them."""
    if concepts is None:
        return cs.used_ids()
    bad = [k for k in concepts if not 0 <= int(k) < cs.n_concepts]
    if bad:
        raise RunError(f"Concept {bad[0]} does not exist: method '{cs.method}' of run '{run_name}' has concepts "
                       f"0 to {cs.n_concepts - 1}.")
    return list(dict.fromkeys(int(k) for k in concepts))


def cloud_uri(run_dir: Path, method: str, k: int, top_words_json: str) -> str | None:
    """Concept k's word cloud (a palette PNG) as a data URI: the run's stored cloud, drawn and
    stored now if the run has none yet, as the dashboard does; None where no cloud can be drawn
    (as on the dashboard, the concept then shows its words)."""
    path = concept_cloud(run_dir, method, k, top_words_json)
    if path is None:
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


# --- pieces of the page ---------------------------------------------------------------------------

def faithfulness_html(run, method: str) -> str:
    """The run's faithfulness table (the exported method's rows marked); a note when the run's
    evaluation has not finished."""
    path = run.dir / "eval" / "faithfulness.parquet"
    if not run.manifest.is_complete("evaluate") or not path.exists():
        return "<p class=meta>The run's evaluation has not finished, so there is no faithfulness table yet.</p>"
    df = run.faithfulness()
    head = ("method", "target", "sentences × seeds", "mean Δconfidence [95% CI]", "flip rate [95% CI]",
            "energy removed")
    rows = []
    for r in df.itertuples(index=False):
        cells = [display_name(r.method), r.target, f"{int(r.n_sentences)} × {int(r.n_seeds)}",
                 _ci(r.mean_conf_drop, r.conf_drop_low, r.conf_drop_high),
                 _ci(r.flip_rate, r.flip_rate_low, r.flip_rate_high), _num(r.mean_energy)]
        tds = "".join(f"<td{' class=n' if i >= 2 else ''}>{_e(c)}</td>" for i, c in enumerate(cells))
        rows.append(f"<tr{' class=this' if r.method == method else ''}>{tds}</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def class_bars(row) -> str:
    """The concept's members per class as bars (no chart library: plain boxes)."""
    dist = browse.class_distribution(row)
    if not len(dist):
        return ""
    top = max(int(dist["count"].max()), 1)
    return "".join(f'<div class=bar><span>{_e(c)}</span><i style="width:{100 * int(n) / top:.0f}%"></i>'
                   f"<small>{int(n)}</small></div>" for c, n in zip(dist["class"], dist["count"]))


def _facts(row) -> str:
    return f"{int(row['size'])} members, purity {float(row['purity']):.2f} ({_e(row['dominant_class'])})"


def card_html(cs, k: int, has_cloud: bool, sentences: list[str], tags: str = "") -> str:
    """A grid card: the cloud (or sentences, or words), the label, the size and the strongest
    linguistic tags (`tag_alignment.card_lines`); it links to the concept's section."""
    row = cs.summary.loc[k]
    if sentences:
        picture = "<div class=sentences>" + "".join(f"<p>{_e(t)}</p>" for t in sentences[:3]) + "</div>"
    elif has_cloud:
        picture = f'<div class="cloud w{k}" role="img" aria-label="word cloud of c{k}"></div>'
    else:
        picture = f"<p class=sentences>{_e(', '.join(w for w, _ in cs.top_words(k, N_WORDS)))}</p>"
    tags = f"<small class=tags>{_e(tags)}</small>" if tags else ""
    return f'<a class=card href="#c{k}">{picture}<b>{_e(cs.label(k))}</b><small>{_facts(row)}</small>{tags}</a>'


def section_html(cs, k: int, has_cloud: bool, contexts, sentences: list[str], tags: str = "") -> str:
    """One concept's section: label, size and purity, linguistic tags, cloud, class distribution,
    top words and contexts with the member word highlighted (prediction rows: their sentences)."""
    row = cs.summary.loc[k]
    top = ", ".join(f"{w} ({n})" for w, n in cs.top_words(k, N_WORDS)) or "none (prediction rows only)"
    items = [f"<li>{browse.highlight_html(r.text, r.start, r.end)}</li>" for r in contexts.itertuples() if r.start >= 0]
    items += [f"<li>{_e(t)} <i>(prediction)</i></li>" for t in sentences]
    cloud = f'<div class="cloud w{k}" role="img" aria-label="word cloud of c{k}"></div>' if has_cloud else ""
    facts = label_facts(cs.labels.get(k)) if cs.labels is not None else None
    return (f'<section class=concept id="c{k}"><h2>{_e(cs.label(k, 5))}</h2>'
            + (f"<p class=label>{_e(facts)}</p>" if facts else "")
            + f"<p class=meta>{_facts(row)}, {int(row['n_pred'])} prediction rows · "
            '<a href="#grid">back to the grid</a></p>'
            + (f"<p class=tags>Tags: {_e(tags)}</p>" if tags else "")
            + f"<div class=cols><div>{cloud}<h3>Class distribution</h3>{class_bars(row)}</div>"
            f"<div><h3>Top words</h3><p>{_e(top)}</p><h3>Contexts</h3><ul class=contexts>{''.join(items)}</ul>"
            "</div></div></section>")


# --- the file -----------------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def progress_text(done: int, total: int, elapsed_s: float) -> str:
    """'120 of 400 concepts drawn, about 30 s left', the time left estimated from the pace so far."""
    said = f"{done} of {total} concepts drawn"
    if not 0 < done < total:
        return said
    left = elapsed_s / done * (total - done)
    return said + (f", about {left:.0f} s left" if left < 90 else f", about {left / 60:.0f} min left")


def render(run, method: str | None = None, concepts=None, progress: Progress | None = None) -> str:
    """The HTML text of the export of `method`'s concepts in `run` (all concepts with members, or
    the ids in `concepts`). `progress(done, total)` is called once per concept drawn."""
    method = choose_method(run, method)
    cs = run.concept_set(method)
    ids = choose_concepts(cs, run.dir.name, concepts)
    texts, seed = run.texts, int(run.cfg.seed)
    styles, cards, sections = [], [], []
    lines = tag_alignment.card_lines(run.tag_profiles(method, cs=cs)) if run.tags is not None else {}
    contexts_of = all_member_contexts(texts, run.store.tokens, cs.assignments, ids, n=N_CONTEXTS, seed=seed)
    for done, k in enumerate(ids, 1):
        tags = lines.get(k, "")
        row = cs.summary.loc[k]
        by_sentence = is_prediction_concept(row)  # shown by its sentences, as on the dashboard
        sentences = prediction_examples(texts, row)
        uri = None if by_sentence else cloud_uri(run.dir, method, k, cs.cloud_words(k))
        if uri:
            styles.append(f'.w{k}{{background-image:url("{uri}")}}')
        cards.append(card_html(cs, k, uri is not None, sentences if by_sentence else [], tags))
        sections.append(section_html(cs, k, uri is not None, contexts_of[k], sentences, tags))
        if progress is not None:
            progress(done, len(ids))
    about = ", ".join(f"{k} {v}" for k, v in browse.provenance(run, method).items())
    title = f"vqlc concepts: {display_name(method)} in run {run.dir.name}"
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">', f"<title>{_e(title)}</title>",
        f"<style>{CSS}</style>", "<style>" + "\n".join(styles) + "</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class=meta>{_e(about)}; data {_e(run.cfg.data.dataset)}; {cs.n_concepts} concepts, {len(ids)} shown. "
        "Written by <code>vqlc export-html</code>; it needs no server or network.</p>",
        "<h2>Faithfulness over the test set</h2>",
        "<p class=meta>Mean drop in the predicted class's confidence when centred concept directions are ablated at "
        "layer l (95% bootstrap intervals), the flip rate and the share of the pooled representation's energy "
        "removed; the control rows are what a concept must beat.</p>", faithfulness_html(run, method),
        f'<h2 id="grid">Concepts ({len(ids)})</h2>', '<div class=grid>', *cards, "</div>", *sections,
        "</body></html>", ""])


def default_out(run, method: str) -> Path:
    return Path(f"{run.dir.name}-{method}-concepts.html")


def write(run, method: str | None = None, out: str | Path | None = None, concepts=None,
          progress: Progress | None = None) -> Path:
    """Write the export (see `render`, and its `progress`) to `out` atomically: a file, or a
    folder to write <run>-<method>-concepts.html in (default: the current folder)."""
    method = choose_method(run, method)
    out = Path(out) if out is not None else default_out(run, method)
    if out.is_dir():
        out = out / default_out(run, method).name
    text = render(run, method, concepts, progress)
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return out
