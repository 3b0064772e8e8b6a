"""Build: explains what a run is, lists the runs (those the other pages do not show, with what to do)
and builds a preset, on its own texts or on an uploaded file, with a progress bar and what the
stages say (the fine-tuning's time estimate among them)."""

import pandas as pd
import streamlit as st

import vqlc_ui
from vqlc_core.pipeline import uploads
from vqlc_core.pipeline.config import PRESETS, build_command, preset
from vqlc_core.pipeline.overview import runs_overview
from vqlc_core.pipeline.run import Run, has_a_method, is_built
from vqlc_core.data.datasets import file_columns
from vqlc_core.methods.base import display_name


def run_status(path) -> str:
    """Whether the pages show run `path`, and the command that finishes it when it is not fully built."""
    if is_built(path):
        return "ready"
    try:
        cmd = build_command(Run(path).rebuild_config())
    except ValueError as e:  # a run this version cannot read (RunError): the sentence says what to do
        return f"not shown: {e}"
    if has_a_method(path):
        return f"shown, not finished: finish it with {cmd}"
    return f"not shown (no finished concept method): build it with {cmd}"


vqlc_ui.app_navigation()
name = st.sidebar.selectbox("Preset", sorted(PRESETS), index=sorted(PRESETS).index("default"))
own = st.sidebar.radio("Texts", ["the preset's", "my own file"], help="your own labelled texts: a .csv, .jsonl or "
                       ".parquet file with a text and a label column, built with the preset's other settings") \
    == "my own file"
st.title("Build a run")
cfg = preset(name, cache_dir=vqlc_ui.cache_dir())
if own:
    up = st.file_uploader("Labelled texts (.csv, .jsonl or .parquet)", type=["csv", "jsonl", "json", "parquet"])
    if up is None:
        st.info("Upload a file with one text and one label per row; you then choose its columns.")
        st.stop()
    with vqlc_ui.guard():
        path = uploads.save_upload(up.name, up.getvalue(), vqlc_ui.cache_dir())
        cols = file_columns(path)
    a, b = st.columns(2)
    text_col = a.selectbox("Text column", cols, index=uploads.guess_column(cols, "text"))
    label_col = b.selectbox("Label column", cols, index=uploads.guess_column(cols, "label", avoid=text_col))
    c, d = st.columns(2)
    run_name = c.text_input("Run name", uploads.default_run_name(path))
    limit = d.number_input("Use at most this many texts (0: all)", 0, None, 0, step=100,
                           help="a seeded, stratified subset, as --limit")
    with vqlc_ui.guard():
        cfg = uploads.upload_config(name, path, run_name, text_col, label_col, int(limit), vqlc_ui.cache_dir())
st.markdown(
    f"A run fine-tunes **{cfg.extract.model}** for its task on **{cfg.data.dataset}**, extracts its layer "
    f"representations, trains the classifier, fits {', '.join(display_name(m) for m in cfg.methods.methods)} with K = {cfg.methods.n_concepts}, evaluates faithfulness and "
    f"stores the concept maps, all under `{cfg.run_dir}`. An interrupted build resumes where it stopped. The "
    f"command line does the same: `{build_command(cfg)}`.")
runs = runs_overview(vqlc_ui.cache_dir())
if len(runs):
    runs["test accuracy"] = [f"{a:.3f}" if pd.notna(a) else "not built yet" for a in runs["test accuracy"]]
    runs["what to do"] = [run_status(vqlc_ui.cache_dir() / "runs" / r) for r in runs["run"]]
    st.dataframe(runs, hide_index=True,
                 column_config={"word alignment": st.column_config.NumberColumn(
                     help="words the tokenizer aligns per word of a plain split of the text; a build refuses a "
                          "model outside 0.70-1.60", format="%.3f"),
                     "what to do": st.column_config.TextColumn(
                         help="a run with no finished concept method is not offered by the other pages")})
    for name, note in zip(runs["run"], runs["concept sizes"]):
        if note:  # a small data set for its K (methods.sizing, written by the fitset stage)
            st.info(vqlc_ui.plain(f"{name}: {note}"))
else:
    st.caption("No run is built yet.")

if st.button(f"Build '{cfg.run}'", type="primary", icon=":material/play_arrow:"):
    bar = st.progress(0.0, text="starting")
    stage_line = st.empty()

    said = st.empty()  # what the stages say as they go, e.g. the fine-tuning's time estimate

    def on_stage(i, n, stage):
        bar.progress(i / n, text=f"{stage} ({i}/{n})" if stage != "done" else "done")
        stage_line.caption(f"Stage {min(i + 1, n)} of {n}: {stage}" if stage != "done" else "All stages done.")

    with vqlc_ui.guard(), vqlc_ui.build_messages(lambda m: said.info(vqlc_ui.plain(m))):
        from vqlc_core.base.hardware import torch_threads, usable_cores
        from vqlc_core.pipeline.build import build

        with torch_threads(usable_cores()):  # the server explains on one thread; a build uses every core
            build(cfg, on_stage=on_stage)
    st.success(f"Run '{cfg.run}' is built; open the Concepts page.")
