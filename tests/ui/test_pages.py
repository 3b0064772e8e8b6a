"""Dashboard pages, one AppTest per page, on a small real run (MiniLM, 300 MR sentences, K = 20)
built once into cache/runs/apptest. Session state is seeded to simulate arriving from another
page. First-render times are printed (`pytest -s`)."""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import time
import zipfile

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from vqlc_core.views import report
from vqlc_core.pipeline.run import FORMAT_VERSION
from vqlc_core.evaluate.faithfulness import MATCHED, PREDICTION
from vqlc_ui import serve

RUN = "apptest"
PAGES = [p.stem for p in serve.page_files()]  # app.py's list, in its order
SENTENCE = "the plot is thin but the actors seem to enjoy themselves"  # plain words, one word each


def page(name: str, method: str = "vqlc", **state) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=120)
    at.session_state["run"] = RUN
    at.session_state["method"] = method
    for k, v in state.items():
        at.session_state[k] = v
    return at


def rendered(at: AppTest, label: str = "") -> AppTest:
    t0 = time.perf_counter()
    at.run()
    print(f"\n{label or 'page'}: first render {time.perf_counter() - t0:.2f} s")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


def plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def n_points(trace: dict) -> int:
    """Points in a plotly trace, whose arrays may come as lists or as base64 typed arrays."""
    x = trace["x"]
    if isinstance(x, dict):
        return len(base64.b64decode(x["bdata"])) // np.dtype(x["dtype"]).itemsize
    return len(x)


def html_bodies(at: AppTest) -> list[str]:
    return [m.value for m in at.html if "<span" in m.value]  # the coloured sentence: st.html, no Markdown


@pytest.mark.slow
@pytest.mark.parametrize("name", PAGES)
def test_every_page_renders_without_an_exception(cache_env, name):
    rendered(page(name), name)


@pytest.mark.slow
def test_concepts_page_opens_a_concept_with_highlighted_contexts_and_finds_words(cache_env):
    at = rendered(page("concepts", concept=3, concept_method="vqlc"), "concepts (concept open)")
    assert any("<mark>" in m.value for m in at.markdown)
    assert plotly_specs(at), "the class distribution chart is missing"
    at.sidebar.text_input[0].input("the").run()
    assert not at.exception
    assert any("concept(s) hold 'the'" in c.value for c in at.caption)


@pytest.mark.slow
def test_codebook_map_plots_every_concept_and_shows_the_chosen_one(cache_env):
    at = rendered(page("codebook_map", concept=2, concept_method="vqlc"), "codebook_map")
    spec = plotly_specs(at)[0]
    points = sum(n_points(trace) for trace in spec["data"])
    assert points == len(cache_env.concept_map("vqlc"))
    assert any(m.value.startswith("c2:") for m in at.subheader)


@pytest.mark.slow
def test_explain_shows_the_prediction_and_a_concept_for_every_word(cache_env):
    at = page("explain")
    at.run()
    at.text_area[0].input(SENTENCE)
    rendered(at, "explain (rerun with a typed input)")
    assert metric(at, "Prediction").value in cache_env.class_names
    assert 0.0 < float(metric(at, "Confidence").value) <= 1.0
    (body,) = html_bodies(at)
    assert body.count("<span title=") == len(SENTENCE.split())
    assert at.toggle, "no concept to ablate is shown"


@pytest.mark.slow
def test_explain_leads_with_a_waterfall_of_the_inputs_word_concepts_that_adds_up_to_the_prediction(cache_env):
    at = page("explain")
    at.run()
    at.text_area[0].input(SENTENCE)
    rendered(at, "explain (rerun with a typed input)")
    assert at.subheader[0].value.startswith("What carries")
    (fall,) = [s for s in plotly_specs(at) if s["data"][0]["type"] == "waterfall"]
    bars = fall["data"][0]
    total = sum(x for x, how in zip(bars["x"], bars["measure"]) if how != "total")
    assert total == pytest.approx(float(metric(at, "Confidence").value), abs=1e-3)  # the metric shows 3 decimals
    (ranked,) = [m.value for m in at.markdown if "supports" in m.value or "opposes" in m.value]
    scores = [float(line.split("`")[1]) for line in ranked.splitlines()]
    assert scores == sorted(scores, reverse=True) and len(scores) >= 2
    # the input's word concepts only, each named per method and acting through its words: the
    # prediction concept has its own panel
    ids = [int(re.match(r"\d+", line.split("**: VQLC ")[1]).group()) for line in ranked.splitlines()]
    assert len(set(ids)) == len(scores) and all("via <mark>" in line for line in ranked.splitlines())
    assert "Training predictions like this one" in [s.value for s in at.subheader]


@pytest.mark.slow
def test_explain_switches_to_the_global_intervention_and_to_colouring_by_score(cache_env):
    at = rendered(page("explain", text=SENTENCE), "explain")
    next(r for r in at.radio if r.label == "Remove a concept").set_value("global")
    next(r for r in at.radio if r.label == "Colour words").set_value("by score")
    rendered(at, "explain (global, by score)")
    (body,) = html_bodies(at)
    assert "rgba(" in body and body.count("<span title=") == len(SENTENCE.split())
    said = "the drop when the concept alone is removed at every position (the faithfulness tables' intervention)"
    assert any(c.value.startswith(f"Score: {said}") for c in at.caption)
    next(t for t in at.toggle if t.label == "Shapley values").set_value(True)
    rendered(at, "explain (global, Shapley)")
    assert any(c.value.startswith("Score: Shapley value of removing the concepts at every position") for c in at.caption)
    (fall,) = [s for s in plotly_specs(at) if s["data"][0]["type"] == "waterfall"]
    bars = fall["data"][0]
    total = sum(x for x, how in zip(bars["x"], bars["measure"]) if how != "total")
    assert total == pytest.approx(float(metric(at, "Confidence").value), abs=1e-3)  # Shapley values add up too


@pytest.mark.slow
def test_explain_shows_the_train_contexts_nearest_a_word_within_its_concept(cache_env):
    at = rendered(page("explain", text=SENTENCE), "explain")
    box = next(s for s in at.selectbox if s.label.startswith("Why a word sits in its concept"))
    box.set_value(SENTENCE.split().index("thin"))
    rendered(at, "explain (nearest contexts of 'thin')")
    (lines,) = [m.value for m in at.markdown if "(distance " in m.value]
    assert 1 <= len(lines.splitlines()) <= 3 and all("<mark><b>" in line for line in lines.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["vqlc", "kmeans"])
def test_explain_shows_the_prediction_concept_by_its_nearest_train_sentences(cache_env, method):
    from vqlc_core.views import browse
    from vqlc_core.views.names import concept_title
    from vqlc_ui import plain

    at = rendered(page("explain", method=method, text=SENTENCE), f"explain ({method} prediction concept)")
    top = next(d.value for d in at.dataframe if "concept" in d.value.columns)  # the prediction's top concepts
    k = int(top["concept"].iloc[0])
    run, cs = cache_env, cache_env.concept_set(method)
    shown = browse.nearest_prediction_members(run.texts, run.store.tokens, run.store, cs, k)
    assert shown["texts"], f"c{k} of {method} has no train prediction row to show"
    assert "\n".join(f"- {plain(t)}" for t in shown["texts"]) in [m.value for m in at.markdown]
    note = browse.mostly_words_message(cs, k)  # the share of word rows, in the note or a caption
    share = f"Word rows: {browse.percent(shown['word_share'])} of its {shown['size']:,} train members."
    assert [i.value for i in at.info] == ([plain(note)] if note else [])
    assert (share in [c.value for c in at.caption]) == (note is None)
    # its own panel, named per method, with what it adds beyond the class on the test set
    from vqlc_core.evaluate.tables import beyond_the_class

    assert "Training predictions like this one" in [s.value for s in at.subheader]
    assert any(m.value.startswith(f"**{plain(concept_title(cs, method, k))}**") for m in at.markdown)
    assert plain(beyond_the_class(run, method)["sentence"]) in [c.value for c in at.caption]
    controls = next(d.value for d in at.dataframe if "minus control" in d.value.columns)
    assert "class direction" in set(controls["minus control"])


@pytest.mark.slow
def test_toggling_a_concept_changes_the_shown_confidence(cache_env):
    at = page("explain", text=SENTENCE)
    rendered(at, "explain")
    before = float(metric(at, "Confidence").value)
    for t in at.toggle:
        t.set_value(True)
    t0 = time.perf_counter()
    at.run()
    print(f"ablation toggle rerun: {time.perf_counter() - t0:.2f} s")
    ablated = next(m for m in at.metric if m.label.startswith("Ablated"))
    after = float(ablated.value.rsplit("(", 1)[1].rstrip(")"))
    assert after != pytest.approx(before, abs=1e-4)


@pytest.mark.slow
def test_user_html_in_the_input_is_escaped(cache_env):
    # The tokenizer makes "<" a word of its own, so the sentence holds "&lt;" then "img" in
    # separate spans; test_browse checks a contiguous "&lt;img" with whitespace words.
    evil = "<img src=x onerror=alert(1)> a fine <script>alert(2)</script> film"
    at = rendered(page("explain", text=evil), "explain (html input)")
    (body,) = html_bodies(at)
    assert "&lt;" in body and "&gt;" in body and "img" in body
    assert not any("<img" in m.value or "<script" in m.value for m in [*at.markdown, *at.caption, *at.main.html])


@pytest.mark.slow
def test_the_top_concepts_table_has_one_column_order_for_the_example_and_a_typed_sentence(cache_env):
    from vqlc_core.views.browse import EXAMPLE, precomputed_explanation

    assert precomputed_explanation(cache_env.dir, EXAMPLE), "the build stored no example: nothing to compare"
    example, typed = (next(d.value for d in at.dataframe if "probability" in d.value.columns) for at in
                      (rendered(page("explain"), "explain (example)"), rendered(page("explain", text=SENTENCE),
                                                                                 "explain (typed)")))
    assert list(example.columns) == list(typed.columns) == ["concept", "probability", "label"]


@pytest.mark.slow
def test_saving_a_label_says_so_once_after_the_page_reruns(apptest_run, tmp_path, monkeypatch):
    from tests.runcopy import linked_copy

    linked_copy(apptest_run.dir, tmp_path)  # labels are saved with the run: this one's are the test's own
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = rendered(page("concepts", concept=3, concept_method="vqlc"), "concepts (label)")
    next(t for t in at.text_input if t.label == "Name").input("thin words")
    next(b for b in at.button if b.label == "Save the label").click()
    rendered(at)
    assert [t.value for t in at.toast] == ["Label of c3 saved with the run, marked as edited."]
    assert any(h.value.startswith("c3: thin words") for h in at.subheader)
    assert [s.value for s in at.success] == ["Label of c3 saved with the run, marked as edited."]
    again = rendered(at)
    assert not again.toast  # once
    assert [s.value for s in again.success] == ["Label of c3 saved with the run, marked as edited."]  # the line stays


@pytest.mark.slow
def test_compare_shows_the_three_methods_and_the_faithfulness_table(cache_env):
    at = rendered(page("compare", text=SENTENCE), "compare")
    # only the open tab (the first) is drawn; each other tab is drawn when it is chosen
    assert [s.value for s in at.subheader] == ["VQLC", "K-Means", "LACOAT", "Faithfulness"]
    assert {"Faithfulness", "Against matched controls", "Beyond the single cut", "Cost and codebook use",
            "Linguistic tags"} <= {t.label for t in at.tabs}
    assert len(html_bodies(at)) == 3
    specs = plotly_specs(at)
    faith = at.dataframe[0].value
    shown_as = json.loads(at.dataframe[0].proto.columns)  # numbers as rounded, not cut at four decimals
    tab = {}
    for name in ("Against matched controls", "Beyond the single cut", "Cost and codebook use"):
        at.session_state["compare_tab"] = name
        rendered(at, f"compare ({name})")
        tab[name] = {"markdown": [m.value for m in at.markdown], "dataframe": [d.value for d in at.dataframe]}
        assert [s.value for s in at.subheader][3:] == ([] if name.startswith("Cost") else [
            "Against energy-matched controls" if name.startswith("Against") else name])
        specs += plotly_specs(at)[3:]
    assert any("| VQLC | prediction concept | matched concept |" in m for m in tab["Against matched controls"]["markdown"])
    beyond = tab["Beyond the single cut"]["markdown"]
    assert any("| dose | 0.25 | VQLC | prediction concept − matched concept |" in m for m in beyond)
    assert any("| comprehensiveness | 1 | IG salient words | salient words − random words" in m for m in beyond)
    cost = tab["Cost and codebook use"]["dataframe"][0]
    assert set(faith["method"]) == {"control", "K-Means", "LACOAT", "VQLC"}
    assert {"global mean", "random direction", "random concept", "prediction concept"} <= set(faith["target"])
    assert (faith["drop, 95% CI low"] <= faith["mean confidence drop"]).all() and "energy removed" in faith
    assert set(cost["method"]) == {"VQLC", "K-Means", "LACOAT"}
    assert not [c for c in [*faith.columns, *cost.columns] if "_" in c]  # no raw column name
    assert shown_as["mean confidence drop"]["type_config"]["format"] == "%g"
    falls, specs = specs[:3], specs[3:]  # each method's waterfall for the input, then the corpus charts
    confidence = float(at.markdown[0].value.split("(confidence ")[1].rstrip(")"))
    for fall in falls:  # each adds up to the prediction, under the method's own concept names
        bars = fall["data"][0]
        assert bars["type"] == "waterfall"
        assert sum(x for x, how in zip(bars["x"], bars["measure"]) if how != "total") == pytest.approx(confidence,
                                                                                                       abs=1e-3)
    names = [" ".join(f["data"][0]["y"]) for f in falls]
    assert "VQLC " in names[0] and "K-Means " in names[1] and "LACOAT " in names[2]
    assert len(specs) == 3
    titles = [a["text"] for a in specs[2]["layout"]["annotations"]]
    assert titles == ["fit time (s)", "peak memory (MB)"]  # not 'variable=fit_time_s'
    assert {t["name"] for t in specs[0]["data"]} == {"control", "K-Means", "LACOAT", "VQLC"}
    dose = specs[1]  # the dose–response lines: one per target, in a panel per method
    assert [a["text"] for a in dose["layout"]["annotations"]] == ["VQLC", "K-Means", "LACOAT"]
    assert {t["name"] for t in dose["data"]} == {"prediction concept", *MATCHED[PREDICTION]}
    points = [len(base64.b64decode(t["x"]["bdata"])) // 8 if isinstance(t["x"], dict) else len(t["x"])
              for t in dose["data"]]  # plotly sends float64 arrays as base64
    assert points == [4] * len(dose["data"])  # α = 0.25, 0.5, 0.75, 1


@pytest.mark.slow
def test_compare_shows_the_attribution_benchmark_of_the_run_where_it_was_measured(cache_env, tmp_path, monkeypatch):
    from tests.views.test_bench import RESULT
    from vqlc_core.views import bench

    (tmp_path / f"attribution_{RUN}.json").write_text(json.dumps(RESULT))
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    at = rendered(page("compare", text=SENTENCE), "compare (with the benchmark)")
    assert "The explanation's attribution" in [s.value for s in at.subheader]
    table = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    assert list(table.columns[1:3]) == ["VQLC, local", "VQLC, global"]


@pytest.mark.slow
def test_a_pin_from_explain_reaches_the_case_study_with_its_exports(apptest_run, tmp_path, monkeypatch):
    from tests.runcopy import linked_copy
    from vqlc_core.views.pins import load_pins

    run = linked_copy(apptest_run.dir, tmp_path)  # pins are saved with the run: this one's are the test's own
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = rendered(page("explain", text=SENTENCE), "explain")
    at.button(key="pin_explain").click().run()
    pins = load_pins(run.dir)
    assert len(pins) == 1 and pins[0]["text"] == SENTENCE and pins[0]["concepts"]
    assert {k: pins[0][k] for k in ("run", "model", "layer", "method", "seed")} == \
        {"run": RUN, "model": "minilm", "layer": run.layer, "method": "vqlc", "seed": 0}
    at.button(key="pin_explain").click().run()  # the same input again
    assert len(load_pins(run.dir)) == 1
    assert any("Already pinned" in t.value for t in at.toast)

    cs = rendered(page("case_study"), "case_study (one pin)")
    labels = {b.label for b in cs.get("download_button")}
    assert {"Table (CSV)", "Table (LaTeX)", "Everything (zip with report.md)", "Ablation PNG", "Sentence SVG"} <= labels
    # A download reruns nothing: a rerun would race the deferred zip (tests/ui/test_browser.py).
    assert all(b.proto.ignore_rerun for b in cs.get("download_button"))
    assert any("run apptest, model minilm" in c.value for c in cs.caption)
    assert len(cs.dataframe[0].value) == len(pins[0]["concepts"])
    bundle = zipfile.ZipFile(io.BytesIO(report.bundle(pins)))
    assert "report.md" in bundle.namelist()
    assert bundle.read("figures/pin1_sentence.png").startswith(b"\x89PNG")


def test_pages_explain_and_stop_without_a_built_run(tmp_path, monkeypatch):
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = rendered(page("concepts"), "concepts (no run)")
    assert "No run is built yet" in at.info[0].value
    at = rendered(page("build"), "build (no run)")
    assert at.button[0].label == "Build 'default'"


@pytest.mark.slow
def test_the_build_page_says_when_a_runs_concepts_average_few_fit_rows(cache_env):
    """The apptest run fits 20 prediction concepts on its 240 train predictions (12 rows a
    concept): the fitset stage wrote one sentence with the number to pass, and the Build page
    shows it beside the run's name."""
    from vqlc_core.methods.sizing import size_notes

    fit = cache_env.manifest.data["stages"]["fitset"]
    m = cache_env.cfg.methods
    want = size_notes(fit["n_rows"] - fit["n_prediction_rows"], fit["n_prediction_rows"], m.n_concepts,
                      m.prediction_concepts)
    assert fit["size_notes"] == want and any("--prediction-concepts 12" in n for n in want)
    at = rendered(page("build"), "build (size notes)")
    assert f"{RUN}: {' '.join(want)}" in [i.value.replace("\\", "") for i in at.info]


def test_a_broken_run_is_one_sentence_not_a_traceback(tmp_path, monkeypatch):
    bad = tmp_path / "runs" / "old"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text(json.dumps({"format_version": 99, "config": {}, "stages": {}}))
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = page("explain", text=SENTENCE)
    at.session_state["run"] = "old"
    at.run()
    assert not at.exception and not at.error
    assert "1 run(s) have no finished concept method; the **Build** page lists them" in at.info[0].value
    frame = rendered(page("build"), "build (a broken run)").dataframe[0].value.set_index("run")
    assert f"expected format {FORMAT_VERSION}, got 99" in frame.at["old", "what to do"]


# --- a run that is not finished: the command the page suggests carries the run's own settings ---

def _parsed(command: str):
    """The configuration the command line builds from `command` (`vqlc build ...`)."""
    from vqlc_core.pipeline.cli import config_from_args, parser

    words = shlex.split(command)
    assert words[:2] == ["vqlc", "build"], command
    return config_from_args(parser().parse_args(words[1:]))


@pytest.mark.parametrize("name, kw", [
    ("default", {}),
    ("default", {"run": "r1", "limit": 300, "n_concepts": 20, "faithfulness_texts": 20}),
    ("decoder-bbc", {"run": "r2", "limit": 300}),
    ("decoder", {"run": "r3", "layer": 5, "pooling": "mean", "aggregation": "mean", "dtype": "float32"}),
    ("default", {"run": "r4", "dataset": "/data/my reviews.csv", "text_column": "sentence", "label_column": "stars",
                 "methods": ("vqlc", "kmeans"), "seed": 3, "vqlc_beta": 0.5, "cache_dir": "/tmp/a cache"}),
])
def test_the_suggested_build_command_carries_the_runs_own_settings(monkeypatch, name, kw):
    from vqlc_core.pipeline.config import build_command
    from vqlc_core.pipeline.config import preset

    monkeypatch.delenv("VQLC_CACHE_DIR", raising=False)
    cfg = preset(name, **kw)
    command = build_command(cfg)
    assert ("--preset " + name in command) == (name != "default")
    assert _parsed(command).flat() == cfg.flat()


def _killed_in_its_first_stage(cache, request):
    """Run 'half' as a build killed in its first stage leaves it: a manifest and no finished stage
    (a first build that fails with an error leaves no run at all)."""
    src = request.getfixturevalue("apptest_run").dir / "manifest.json"
    manifest = {**json.loads(src.read_text()), "stages": {}}
    (cache / "runs" / "half").mkdir(parents=True)
    (cache / "runs" / "half" / "manifest.json").write_text(json.dumps(manifest))
    return cache / "runs" / "half"


def _no_classifier_yet(cache, request):
    """A copy of the apptest run whose stages after 'extract' are not finished."""
    from tests.runcopy import sealed_copy

    run = sealed_copy(request.getfixturevalue("apptest_run").dir, cache, name="half")
    for stage in list(run.manifest.data["stages"]):
        if stage not in ("texts", "extract"):
            run.manifest.data["stages"].pop(stage)
    run.manifest.save()
    return run.dir


@pytest.mark.parametrize("make", [_killed_in_its_first_stage, _no_classifier_yet],
                         ids=["first build killed", "no classifier yet"])
def test_a_run_with_no_concept_method_is_listed_on_the_build_page_only(request, tmp_path, monkeypatch, make):
    from tests.runcopy import linked_copy
    from vqlc_core.pipeline.run import Run

    run_dir = make(tmp_path, request)
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = page("explain", text=SENTENCE)
    at.session_state["run"] = "half"
    at.run()
    assert not at.exception and not at.error and not at.sidebar.selectbox  # no run to choose
    (info,) = [i.value for i in at.info]
    assert "No run is built yet" in info and "1 run(s) have no finished concept method" in info, info

    linked_copy(request.getfixturevalue("apptest_run").dir, tmp_path)
    at = page("concepts")
    at.session_state["run"] = "half"  # e.g. from an old link: the pages show a run they can show
    rendered(at, "concepts (beside a half-built run)")
    assert [s.options for s in at.sidebar.selectbox if s.label == "Run"] == [[RUN]]

    frame = rendered(page("build"), "build").dataframe[0].value.set_index("run")
    accuracy = Run(tmp_path / "runs" / RUN).manifest.data["stages"]["classifier"]["accuracy"]["test"]
    assert frame.at[RUN, "test accuracy"] == f"{accuracy:.3f}"
    assert frame.at[RUN, "what to do"] == "ready"
    assert frame.at["half", "test accuracy"] == "not built yet"
    todo = frame.at["half", "what to do"]
    assert todo.startswith("not shown (no finished concept method): build it with vqlc build "), todo
    monkeypatch.delenv("VQLC_CACHE_DIR")
    assert _parsed(todo.split("build it with ", 1)[1]).flat() == Run(run_dir).rebuild_config().flat()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["concepts", "explain"])
def test_a_concept_whose_cloud_cannot_be_drawn_shows_its_words(cache_env, monkeypatch, name):
    monkeypatch.setattr("vqlc_core.views.wordclouds.concept_cloud", lambda *a, **k: None)
    at = rendered(page(name, text=SENTENCE), f"{name} (no word clouds)")
    assert not at.get("image"), "a word cloud was shown"
    cs = cache_env.concept_set("vqlc")
    shown = {c.value for c in at.caption}
    word_concepts = [k for k in range(cs.n_concepts) if cs.top_words(k, 1)]
    lists = [k for k in word_concepts if ", ".join(w for w, _ in cs.top_words(k, 15)).replace(".", "\\.") in shown]
    assert len(lists) >= (2 if name == "concepts" else 1), shown


@pytest.mark.slow
def test_the_concepts_page_prepares_the_html_file_before_offering_it(cache_env):
    at = rendered(page("concepts", method="kmeans"), "concepts")
    assert "Download as one HTML file" not in {b.label for b in at.get("download_button")}
    next(b for b in at.sidebar.button if b.label == "Prepare the HTML file").click().run()
    assert not at.exception and not at.error
    offered = [b for b in at.get("download_button") if b.label == "Download as one HTML file"]
    assert len(offered) == 1 and offered[0].proto.ignore_rerun  # the download reruns nothing
    assert offered[0].proto.url  # the file's bytes, drawn while the progress bar showed
    at.sidebar.text_input[0].input("the").run()  # another widget: the prepared file stays offered
    assert "Download as one HTML file" in {b.label for b in at.get("download_button")}


def test_the_build_page_builds_an_uploaded_file_with_the_command_lines_column_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    csv = "sentence,stars,id\n" + "".join(f"text number {i} is {'good' if i % 2 else 'bad'},{i % 2},{i}\n"
                                          for i in range(20))
    at = page("build")
    at.run()
    at.sidebar.radio[0].set_value("my own file").run()
    assert "Upload a file" in at.info[0].value and not at.button  # nothing to build before a file
    at.file_uploader[0].set_value(("my reviews.csv", csv.encode(), "text/csv")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    text, label = (next(s for s in at.selectbox if s.label == name) for name in ("Text column", "Label column"))
    assert (text.value, label.value) == ("sentence", "stars")  # no 'text'/'label' columns: the first others
    label.set_value("stars").run()
    saved = list((tmp_path / "uploads").iterdir())
    assert len(saved) == 1 and saved[0].read_text() == csv
    at.text_input[0].set_value("mine").run()
    assert at.button[0].label == "Build 'mine'"
    command = next(m.value for m in at.markdown if "vqlc build" in m.value).split("`")[-2]
    cfg = _parsed(command)
    assert (cfg.run, cfg.data.dataset, cfg.data.text_column, cfg.data.label_column) == \
        ("mine", str(saved[0]), "sentence", "stars")
    next(s for s in at.selectbox if s.label == "Label column").set_value("sentence").run()
    assert "both 'sentence'" in at.error[0].value


def test_build_messages_pass_on_what_the_stages_log():
    import logging

    import vqlc_ui

    got = []
    with vqlc_ui.build_messages(got.append):
        logging.getLogger("vqlc_core.data.finetune").info("fine-tune: about %d s", 12)
        logging.getLogger("vqlc_core.data.finetune").debug("not this")
    logging.getLogger("vqlc_core.data.finetune").info("nor this, after the block")
    assert got == ["fine-tune: about 12 s"]
