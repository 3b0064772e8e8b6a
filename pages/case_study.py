"""Case study: the pinned inputs as their page showed them (the concepts ablated there together and
the prediction they gave, first), and each concept ablated alone, exported as figures (PNG, SVG),
tables (CSV, LaTeX) and a zip bundle with a Markdown report, each saying which run, model, layer,
method and seed it shows. Pins are saved with the run (`<run>/ui/pins.json`), so they outlive the session and
everyone who opens the run sees them. Exports are drawn when downloaded; a download does not rerun
the page."""

from functools import partial

import streamlit as st

import vqlc_ui
from vqlc_core.views import browse, report
from vqlc_core.views.names import method_concept
from vqlc_core.views.pins import load_pins, remove_pin

run, _ = vqlc_ui.sidebar(choose_method=False)
with vqlc_ui.guard():
    pins = load_pins(run.dir)
    built = set(run.methods_built())
    # named by the concepts' labels of now, for pins of this run's concepts
    pins = [browse.relabel_pin(p, vqlc_ui.concepts(str(run.dir), vqlc_ui.stamp(run), p["method"]).label)
            if p.get("run", run.dir.name) == run.dir.name and p["method"] in built else p for p in pins]
st.title("Case study")
if not pins:
    st.info(f"Nothing is pinned from run '{run.dir.name}' yet: on the Explain or Compare page, press **Pin for the "
            "case study**.")
    st.stop()

table = report.pins_table(pins)
st.dataframe(table, hide_index=True)
c1, c2, c3 = st.columns(3)
# on_click="ignore": a download changes nothing on the page, and a rerun it started would race the
# zip being drawn (Streamlit drops a drawn file's answer that is queued when a run starts, and the
# button then waits, disabled, for minutes).
c1.download_button("Table (CSV)", report.table_csv(table), "case_study.csv", "text/csv", on_click="ignore")
c2.download_button("Table (LaTeX)", report.table_latex(table), "case_study.tex", "text/x-tex", on_click="ignore")
c3.download_button("Everything (zip with report.md)", partial(report.bundle, list(pins)), "case_study.zip",
                   "application/zip", type="primary", on_click="ignore")

for i, pin in enumerate(pins, 1):
    with st.container(border=True):
        st.subheader(f"Pin {i}: {pin['method']}, {pin['prediction']} ({pin['confidence']:.3f})")
        st.caption(vqlc_ui.plain(report.provenance_line(pin)))
        vqlc_ui.colored_sentence(pin["text"], pin["words"], [w["concept"] for w in pin["words"]], pin["labels"])
        if together := pin.get("ablated"):
            st.metric(f"Ablated {' + '.join(method_concept(pin['method'], k) for k in together['concepts'])} together: "
                      "prediction",
                      f"{together['new_prediction']} ({together['new_confidence']:.3f})",
                      delta=f"{together['delta']:+.3f} on '{pin['prediction']}'",
                      help="As the page showed it when it was pinned; the table then gives each concept alone.")
        st.dataframe(report.pins_table([pin]).drop(columns=["pin", *browse.PROVENANCE, "text"]), hide_index=True)
        for k, line in sorted((int(k), v) for k, v in (pin.get("tags") or {}).items()):
            st.caption(vqlc_ui.plain(f"{method_concept(pin['method'], k)} tags: {line}"))
        cols = st.columns(5)
        for col, (name, draw, fmt, mime) in zip(cols, [
            ("Ablation PNG", report.ablation_figure, "png", "image/png"),
            ("Ablation SVG", report.ablation_figure, "svg", "image/svg+xml"),
            ("Sentence PNG", report.sentence_figure, "png", "image/png"),
            ("Sentence SVG", report.sentence_figure, "svg", "image/svg+xml"),
        ]):
            col.download_button(name, partial(draw, pin, fmt), f"pin{i}_{name.split()[0].lower()}.{fmt}", mime,
                                key=f"dl_{i}_{name}", on_click="ignore")
        if cols[4].button("Unpin", key=f"unpin{i}"):
            remove_pin(run.dir, pin.get("run"), pin["method"], pin["text"], browse.ablated_ids(pin))
            st.rerun()
