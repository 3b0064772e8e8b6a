"""The vqlc dashboard: `python -m vqlc_ui.serve` (`streamlit run app.py` with the libraries
imported before the server listens, so a first page does not wait for them), or ./run.sh.
Registers the pages; each page reads a run directory under $VQLC_CACHE_DIR/runs/ (default
cache/runs/) through vqlc_ui."""

import streamlit as st

import vqlc_ui

# The tab icon is an emoji (drawn by the browser as a data: URL): a Material icon here is fetched
# from fonts.gstatic.com, which fails offline and tells a third party the dashboard was opened.
# The Material icons of pages and buttons are drawn from the font Streamlit serves itself.
st.set_page_config(page_title="vqlc", page_icon="🧩", layout="wide")
page = st.navigation([
    st.Page("pages/concepts.py", title="Concepts", icon=":material/cloud:", default=True),
    st.Page("pages/codebook_map.py", title="Codebook map", icon=":material/scatter_plot:"),
    st.Page("pages/explain.py", title="Explain", icon=":material/psychology:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/view_column:"),
    st.Page("pages/case_study.py", title="Case study", icon=":material/push_pin:"),
    st.Page("pages/judges.py", title="Judges", icon=":material/gavel:"),
    st.Page("pages/labels.py", title="Labels", icon=":material/label:"),
    st.Page("pages/build.py", title="Build", icon=":material/build:"),
])
try:
    page.run()
finally:
    vqlc_ui.warm_up()  # the model loads in the background once the page is drawn, not while it is
