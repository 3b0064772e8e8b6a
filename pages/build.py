"""Build: explains what a run is and builds the default preset with a progress bar."""

import streamlit as st

import vqlc_ui
from vqlc_core.build.config import PRESETS, preset
from vqlc_core.build.run import runs_overview

vqlc_ui.app_navigation()
name = st.sidebar.selectbox("Preset", sorted(PRESETS), index=sorted(PRESETS).index("default"))
st.title("Build a run")
cfg = preset(name, cache_dir=vqlc_ui.cache_dir())
st.markdown(
    f"A run fine-tunes **{cfg.extract.model}** for its task on **{cfg.data.dataset}**, extracts its layer "
    f"representations, trains the classifier, fits VQLC, K-Means and LACOAT with K = {cfg.methods.n_concepts}, evaluates faithfulness and "
    f"stores the concept maps, all under `{cfg.run_dir}`. An interrupted build resumes where it stopped. The "
    f"command line does the same: `python -m vqlc_core build --preset {name}`.")
runs = runs_overview(vqlc_ui.cache_dir())
if len(runs):
    st.dataframe(runs, hide_index=True,
                 column_config={"word alignment": st.column_config.NumberColumn(
                     help="words the tokenizer aligns per word of a plain split of the text; a build refuses a "
                          "model outside 0.70-1.60", format="%.3f")})
else:
    st.caption("No run is built yet.")

if st.button(f"Build '{cfg.run}'", type="primary", icon=":material/play_arrow:"):
    bar = st.progress(0.0, text="starting")
    stage_line = st.empty()

    def on_stage(i, n, stage):
        bar.progress(i / n, text=f"{stage} ({i}/{n})" if stage != "done" else "done")
        stage_line.caption(f"Stage {min(i + 1, n)} of {n}: {stage}" if stage != "done" else "All stages done.")

    with vqlc_ui.guard():
        from vqlc_core.build.pipeline import build

        build(cfg, on_stage=on_stage)
    st.success(f"Run '{cfg.run}' is built; open the Concepts page.")
