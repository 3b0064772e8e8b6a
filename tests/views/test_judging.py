"""What the Judges and Labels pages show (vqlc_core.views.judging), on small real results: judge
answers read by the judge's own parser, summarised by its own tables and written where `vqlc
judge` writes them; labels written where `vqlc label` and the concept view write them."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from vqlc_core.base.runio import RunError, write_json, write_parquet
from vqlc_core.llm import judge, judge_results, labels
from vqlc_core.llm.endpoint import parse_endpoint
from vqlc_core.llm.judge_items import JudgeItem, Shown
from vqlc_core.llm.records import Answer
from vqlc_core.views import judging

STRATA = ["TP", "TN", "FP", "FN"]
TEXT = "a long and winding sentence " * 5  # 140 characters


def items() -> list[JudgeItem]:
    """Four sentences, one per stratum, each showing vqlc's and kmeans' prediction concepts under
    letters that swap from one sentence to the next."""
    out = []
    for t, stratum in enumerate(STRATA):
        methods = ["vqlc", "kmeans"] if t % 2 == 0 else ["kmeans", "vqlc"]
        shown = [Shown(letter, m, "prediction", 3 if m == "vqlc" else 7, f"words: {m}")
                 for letter, m in zip("AB", methods)]
        out.append(JudgeItem(t, f"{t} {TEXT}", "positive", "negative" if stratum in ("FP", "TN") else "positive", 0.9,
                             stratum, shown))
    return out


def answer(ratings: dict[str, int] | None) -> Answer:
    content = "I cannot tell." if ratings is None else json.dumps(
        {k: {"rating": v, "reason": f"reason {k}"} for k, v in ratings.items()})
    return Answer(content, "stop", False)


def judged(run_dir, judges: dict[str, list[Answer]], digest: str = "d1") -> None:
    """Write what `vqlc judge` writes for these judges' answers, on a run whose vqlc concepts
    have `digest`."""
    write_json(run_dir / "manifest.json",
               {"stages": {"vqlc": {"files": {"methods/vqlc/assignments.npy": {"sha256": digest}}}}})
    its = items()
    endpoints = [parse_endpoint(f"name={name},url=http://127.0.0.1:9/v1,model=m-{name}") for name in judges]
    ratings = pd.concat([judge.ratings_frame(name, its, answers) for name, answers in judges.items()],
                        ignore_index=True)
    res = judge.results(SimpleNamespace(dir=run_dir), endpoints, its, ratings, len(its), seed=0)
    write_parquet(run_dir / "llm" / "judge_ratings.parquet", ratings)
    write_json(run_dir / "llm" / "judge.json", res)


# vqlc's concept is rated above kmeans' by both judges; b's answer to sentence 2 does not parse
A = [answer({"A": 3, "B": 1}), answer({"A": 1, "B": 3}), answer({"A": 3, "B": 2}), answer({"A": 2, "B": 3})]
B = [answer({"A": 3, "B": 2}), answer({"A": 1, "B": 2}), answer(None), answer({"A": 1, "B": 3})]


def test_no_results_is_none_and_a_broken_file_is_one_sentence(tmp_path):
    assert judging.judge_results(tmp_path) is None
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "judge.json").write_text("{broken")
    with pytest.raises(RunError, match="cannot be read"):
        judging.judge_results(tmp_path)


def test_each_judge_shows_its_parse_rate_checks_and_table_with_error_bars(tmp_path):
    judged(tmp_path, {"a": A, "b": B})
    res = judging.judge_results(tmp_path)
    assert (res.n_sentences, res.seed, res.strata, res.stale, res.note) == (4, 0, "FN 1, FP 1, TN 1, TP 1", [], None)
    a, b = res.judges
    assert (a.name, b.name) == ("a", "b")
    assert a.source == "m-a at http://127.0.0.1:9/v1"
    assert (a.parse_rate, a.parsed, a.requests, a.unparseable) == ("100%", 4, 4, 0)
    assert (b.parse_rate, b.parsed, b.requests, b.unparseable) == ("75%", 3, 4, 1)
    assert a.copied_reasons == "0%" and a.identical_alike == "none judged"  # no two letters showed one concept
    assert a.by_letter == "A 2.25, B 2.25" and a.letter_variance == "0%"  # swapped letters: no letter effect
    assert list(a.table.columns) == ["role", "method", "n", "mean", "low", "high", "rank", "from_letters"]
    table = a.table.set_index("method")
    assert table.loc["vqlc", "mean"] == 3 and table.loc["kmeans", "mean"] == pytest.approx(1.5)
    assert table.loc["vqlc", "rank"] == 1 and table.loc["kmeans", "rank"] == 2
    assert (table["n"] == 4).all()
    bars = a.bars.set_index("method")
    assert np.allclose(bars["plus"], bars["high"] - bars["mean"])
    assert np.allclose(bars["minus"], bars["mean"] - bars["low"])
    assert bars.loc["vqlc", ["plus", "minus"]].tolist() == [0, 0]  # rated 3 every time: nothing to resample
    assert bars.loc["kmeans", "plus"] > 0 and bars.loc["kmeans", "minus"] > 0
    assert b.table.set_index("method").loc["vqlc", "n"] == 3  # its unparsed answer rates nothing


def test_two_judges_show_their_agreement_and_one_judge_none(tmp_path):
    judged(tmp_path, {"a": A, "b": B})
    agree = judging.judge_results(tmp_path).agreement
    assert (agree.items, agree.items_all_judges) == (8, 6)
    assert agree.pairwise.to_dict("records")[0]["judges"] == "a ~ b" and agree.pairwise["items"].tolist() == [6]
    raw = json.loads((tmp_path / "llm" / "judge.json").read_text())["agreement"]
    assert agree.kendalls_w == f"{raw['kendalls_w']:.2f}"
    assert agree.alpha == ("–" if raw["krippendorff_alpha"] is None else f"{raw['krippendorff_alpha']:.2f}")
    judged(tmp_path, {"a": A})
    assert judging.judge_results(tmp_path).agreement is None


def test_judges_that_both_rate_by_the_letter_are_shown_to_agree_by_position_bias(tmp_path):
    first = answer({"A": 3, "B": 1})  # both judges always rate A above B, whatever A shows
    judged(tmp_path, {"a": [first] * 4, "b": [first] * 4})
    agree = judging.judge_results(tmp_path).agreement
    assert agree.kendalls_w == "1.00" and agree.letter_effects == "a 100%, b 100%"
    assert "reflects the position bias they share" in agree.position_bias
    assert (agree.residual_kendalls_w, agree.residual_alpha) == ("undefined", "undefined")
    assert agree.pairwise["ρ after letter means"].isna().all()
    out = judge_results.judge_table(json.loads((tmp_path / "llm" / "judge.json").read_text()))
    assert "no identical concepts were judged" in out and "position bias" in out and " – " not in out

    judged(tmp_path, {"a": A, "b": B})  # letters swap between sentences: the agreement is their reading
    agree = judging.judge_results(tmp_path).agreement
    raw = json.loads((tmp_path / "llm" / "judge.json").read_text())
    assert agree.letter_effects == ", ".join(f"{n} {raw['judges'][n]['position']['eta_squared']:.0%}" for n in "ab")
    assert agree.position_bias is None and max(raw["agreement"]["letter_effect"].values()) < 0.5
    assert agree.residual_kendalls_w != "undefined"


@pytest.mark.slow
def test_the_judges_page_warns_that_agreement_by_letter_is_position_bias(apptest_run, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT
    from tests.runcopy import linked_copy

    first = answer({"A": 3, "B": 1})
    judged(tmp_path / "results", {"a": [first] * 4, "b": [first] * 4})
    run = linked_copy(apptest_run.dir, tmp_path / "cache")
    shutil.copytree(tmp_path / "results" / "llm", run.dir / "llm")
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(str(ROOT / "pages" / "judges.py"), default_timeout=60)
    at.session_state["run"] = "apptest"
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Kendall's W"] == "1.00" and metrics["W after letter means"] == "undefined"
    assert metrics["Identical concepts rated alike"] == "none judged"
    assert any("reflects the position bias they share" in w.value for w in at.warning)
    assert any("a 100%, b 100%" in c.value for c in at.caption)


def test_a_judge_whose_answers_never_parsed_has_an_empty_table(tmp_path):
    judged(tmp_path, {"mute": [answer(None)] * 4})
    (mute,) = judging.judge_results(tmp_path).judges
    assert (mute.parse_rate, mute.parsed, mute.by_letter, mute.letter_variance) == ("0%", 0, None, "–")
    assert not len(mute.table) and not len(mute.bars)


def test_judged_methods_rebuilt_since_are_stale(tmp_path):
    judged(tmp_path, {"a": A})
    write_json(tmp_path / "manifest.json",
               {"stages": {"vqlc": {"files": {"methods/vqlc/assignments.npy": {"sha256": "d2"}}}}})
    assert judging.judge_results(tmp_path).stale == ["vqlc"]


def test_sentences_are_filtered_by_judge_and_stratum_and_show_every_rating(tmp_path):
    judged(tmp_path, {"a": A, "b": B})
    ratings = judging.judge_results(tmp_path).ratings
    assert judging.filter_options(ratings) == (["a", "b"], sorted(STRATA))
    assert judging.filter_ratings(ratings) is ratings  # nothing chosen: everything
    only_b = judging.filter_ratings(ratings, ["b"], ["FP", "FN"])
    assert set(only_b["judge"]) == {"b"} and set(only_b["stratum"]) == {"FP", "FN"} and len(only_b) == 4
    assert judging.sentence_choices(judging.filter_ratings(ratings, [], ["TN"])) == {1: f"TN · {f'1 {TEXT}'[:90]}"}
    choices = judging.sentence_choices(ratings)
    assert list(choices) == [0, 1, 2, 3] and all(len(c) == len("TP · ") + 90 for c in choices.values())
    assert judging.sentence_choices(ratings.iloc[:0]) == {}

    one = judging.sentence_view(ratings, 2)
    assert (one.text, one.label, one.prediction, one.stratum) == (f"2 {TEXT}", "positive", "negative", "FP")
    (a, parsed_a, shown_a), (b, parsed_b, shown_b) = one.answers
    assert (a, parsed_a, b, parsed_b) == ("a", True, "b", False)
    assert list(shown_a.columns) == judging.RATING_COLUMNS
    assert shown_a["letter"].tolist() == ["A", "B"] and shown_a["method"].tolist() == ["vqlc", "kmeans"]
    assert shown_a["rating"].tolist() == [3.0, 2.0] and shown_a["reason"].tolist() == ["reason A", "reason B"]
    assert shown_b["rating"].isna().all() and (shown_b["reason"] == "").all()


def test_a_methods_labels_are_counted_and_a_rebuilt_methods_are_stale(tmp_path):
    write_json(tmp_path / "manifest.json",
               {"stages": {"vqlc": {"files": {"methods/vqlc/assignments.npy": {"sha256": "d1"}}}}})
    assert judging.labels_view(tmp_path, "vqlc") is None
    labels.set_label(tmp_path, "vqlc", 4, "number words", "Counts.")
    view = judging.labels_view(tmp_path, "vqlc")
    assert (view.state, view.labelled, view.named, view.edited, view.labeller, view.note) == \
        ("current", 1, 1, 1, "none", None)
    llm = {"concept": 2, "status": "no pattern", "name": None, "description": None, "agreement": 1, "edited": False,
           "detection": None}
    labels.save_labels(tmp_path, "vqlc", {2: llm}, {"labeller": {"model": "tiny"}, "note": "a weak labeller"})
    view = judging.labels_view(tmp_path, "vqlc")
    assert (view.labelled, view.named, view.edited, view.labeller, view.note) == (2, 1, 1, "tiny", "a weak labeller")
    assert view.frame["concept"].tolist() == [2, 4] and view.frame["agreement"].tolist()[0] == "1/3"

    write_json(tmp_path / "manifest.json",
               {"stages": {"vqlc": {"files": {"methods/vqlc/assignments.npy": {"sha256": "d2"}}}}})
    stale = judging.labels_view(tmp_path, "vqlc")
    assert stale.state == "stale" and stale.labelled == 0 and not len(stale.frame)
    (tmp_path / "llm" / "labels_kmeans.json").write_text("[1, 2")
    with pytest.raises(RunError, match="is not valid"):
        judging.labels_view(tmp_path, "kmeans")
