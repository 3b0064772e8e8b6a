"""Build: explains what a run is and builds the default preset with a progress bar."""

import streamlit as st

import vqlc_ui
from vqlc_core.config import PRESETS, preset
from vqlc_core.run import list_runs

name = st.sidebar.selectbox("Preset", sorted(PRESETS), index=sorted(PRESETS).index("default"))
st.title("Build a run")
cfg = preset(name, cache_dir=vqlc_ui.cache_dir())
st.markdown(
    f"A run extracts layer representations of **{cfg.extract.model}** on **{cfg.data.dataset}**, trains the "
    f"classifier, fits VQLC, K-Means and LACOAT with K = {cfg.methods.n_concepts}, evaluates faithfulness and "
    f"stores the concept maps, all under `{cfg.run_dir}`. An interrupted build resumes where it stopped. The "
    f"command line does the same: `python -m vqlc_core build --preset {name}`.")
runs = [p.name for p in list_runs(vqlc_ui.cache_dir())]
st.caption("Runs: " + (", ".join(runs) if runs else "none yet"))

if st.button(f"Build '{cfg.run}'", type="primary", icon=":material/play_arrow:"):
    bar = st.progress(0.0, text="starting")
    stage_line = st.empty()

    def on_stage(i, n, stage):
        bar.progress(i / n, text=f"{stage} ({i}/{n})" if stage != "done" else "done")
        stage_line.caption(f"Stage {min(i + 1, n)} of {n}: {stage}" if stage != "done" else "All stages done.")

    with vqlc_ui.guard():
        from vqlc_core.pipeline import build

        build(cfg, on_stage=on_stage)
    st.success(f"Run '{cfg.run}' is built; open the Concepts page.")
