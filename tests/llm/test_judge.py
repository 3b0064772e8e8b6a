"""LLM judges and concept labels: answers are parsed tolerantly and counted when they cannot be,
never replaced by a middle rating; every answer is recorded, so a rerun sends nothing and a
killed run resumes; a server that is down or failing ends in one sentence. The end-to-end tests
start the real `transformers serve` with the offline SmolLM2-135M-Instruct on the small apptest
run (kept small: 4 sentences, 2 concepts with 5 contexts)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CACHE, ROOT, run_cli
from tests.runcopy import linked_copy
from vqlc_core.llm import contexts, detection, judge, judge_results, labelling, labels
from vqlc_core.llm.agreement import agreement, kendalls_w, method_table
from vqlc_core.llm.client import ChatClient, extract_json
from vqlc_core.llm.endpoint import Endpoint, parse_endpoint, started
from vqlc_core.llm.judge_items import JudgeItem, Shown, strata, stratified_sample
from vqlc_core.llm.judge_prompts import parse_judgement
from vqlc_core.llm.label_prompts import agree, parse_label
from vqlc_core.llm.localserver import free_port, local_endpoint, transformers_serve
from vqlc_core.llm.records import Records, chat, request_key
from vqlc_core.base.runio import RunError

METHODS = ["vqlc", "kmeans"]
N = 4  # sentences judged: one per stratum


# --- parsing ------------------------------------------------------------------------------

def test_the_first_json_object_is_cut_out_of_prose_and_fences():
    reply = 'Sure! Here it is:\n```json\n{"A": {"rating": 3, "reason": "praise"}}\n```\nHope this helps {"B": 1}'
    assert extract_json(reply) == {"A": {"rating": 3, "reason": "praise"}}
    assert extract_json("no json here") is None
    assert extract_json("{'status': 'clear', 'name': 'vice'}, 'description'") == {"status": "clear", "name": "vice"}
    cut = '{"status": "clear", "name": "films", "description": "Words about the making of fil'
    assert extract_json(cut) == {"status": "clear", "name": "films", "description": "Words about the making of fil"}
    assert extract_json('{"A": {"rating": 3, "reason": "cut sh') == {"A": {"rating": 3, "reason": "cut sh"}}
    assert extract_json('{"A": {"rating": 3, "rea') is None


def test_a_judgement_parses_only_when_every_letter_has_a_rating_from_1_to_3():
    good = '{"A": {"rating": 3, "reason": "praise"}, "b": {"rating": "2"}, "C": {"rating": 1.0, "reason": null}}'
    assert parse_judgement(good, ["A", "B", "C"]) == {"A": (3, "praise"), "B": (2, ""), "C": (1, "")}
    assert parse_judgement('{"A": {"rating": "Good"}, "B": 1}', ["A", "B"]) == {"A": (3, ""), "B": (1, "")}
    for bad in (4, 0, 2.5, "very good", True, None):
        answer = json.dumps({"A": {"rating": 3, "reason": "x"}, "B": {"rating": bad, "reason": "y"}})
        assert parse_judgement(answer, ["A", "B"]) is None, bad
    assert parse_judgement('{"A": {"rating": 3}}', ["A", "B"]) is None  # a letter missing
    truncated = '{"A": {"rating": 3, "reason": "praise"}, "B": {"rating": 2, "rea'
    assert parse_judgement(truncated, ["A", "B"]) is None  # B was cut off: A alone is no answer
    ran_on = '{"A": {"rating": 3, "reason": "praise"}, "B": {"rating": 2, "reason": "so so"}, "C": {"rating": 1, "r'
    assert parse_judgement(ran_on, ["A", "B"]) == {"A": (3, "praise"), "B": (2, "so so")}  # past the last letter


def test_unparseable_answers_are_counted_not_given_a_middle_rating():
    shown = [Shown("A", "vqlc", "prediction", 1, "words: a"), Shown("B", "kmeans", "prediction", 2, "words: b")]
    items = [JudgeItem(i, "t", "positive", "positive", 0.9, "TP", shown) for i in range(3)]
    answers = [type("A", (), {"content": c, "finish_reason": "stop"})() for c in
               ('{"A": {"rating": 3}, "B": {"rating": 1}}', "I think A is good", '{"A": {"rating": 9}, "B": 2}')]
    ratings = judge.ratings_frame("j", items, answers)
    assert ratings.groupby("text_id")["parsed"].first().tolist() == [True, False, False]
    assert ratings.loc[~ratings["parsed"], "rating"].isna().all()
    table = method_table(ratings, seed=0).set_index("method")
    assert table.loc["vqlc", "mean"] == 3 and table.loc["kmeans", "mean"] == 1 and (table["n"] == 1).all()


def test_labels_parse_tolerantly_and_a_name_is_kept_when_two_of_three_agree():
    long_name = '{"status": "No_Pattern", "name": "a very long name for it", "description": "d"}'
    assert parse_label(long_name) == {"status": "no pattern", "name": "a very long name", "description": "d"}
    assert parse_label('{"status": "fuzzy", "name": "x"}') is None
    assert parse_label('{"status": "clear", "name": " "}') is None
    a = {"status": "clear", "name": "Movie  Words", "description": "first"}
    b = {"status": "mixed", "name": "movie words.", "description": "second"}
    c = {"status": "clear", "name": "verbs", "description": "third"}
    assert agree([a, None, b]) == {"status": "clear", "name": "Movie  Words", "description": "first", "agreement": 2}
    assert agree([a, c, None])["name"] is None
    assert detection.parse_yes_no("Yes, it does.") is True and detection.parse_yes_no("no") is False
    assert detection.parse_yes_no("maybe") is None


def test_detection_is_scored_by_balanced_accuracy_over_the_answers_that_parsed():
    score = detection.balanced_accuracy([True, True, False, None], [False, True])
    assert score["balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert (score["members"], score["non_members"], score["unparseable"]) == (4, 2, 1)
    assert detection.balanced_accuracy([None], [False])["balanced_accuracy"] is None
    assert score["low"] <= score["balanced_accuracy"] <= score["high"]
    perfect = detection.balanced_accuracy([True] * 5, [False] * 5)
    assert perfect["balanced_accuracy"] == perfect["low"] == perfect["high"] == 1.0  # no variation to resample
    few, many = detection.balanced_accuracy([True, False] * 3, [False, True] * 3), \
        detection.balanced_accuracy([True, False] * 300, [False, True] * 300)
    assert few["balanced_accuracy"] == many["balanced_accuracy"] == 0.5
    assert few["high"] - few["low"] > 4 * (many["high"] - many["low"])  # 6 answers a side say little
    assert detection.balanced_accuracy([True, False], [False], seed=3) == \
        detection.balanced_accuracy([True, False], [False], seed=3)


# --- sampling and statistics ---------------------------------------------------------------

def test_sentences_are_sampled_evenly_over_strata_and_reproducibly():
    stratum = np.array(["TP"] * 50 + ["TN"] * 40 + ["FP"] * 3 + ["FN"] * 7)
    picked = stratified_sample(stratum, 20, seed=0)
    counts = pd.Series(stratum[picked]).value_counts().to_dict()
    assert counts == {"FN": 6, "TN": 6, "TP": 5, "FP": 3}  # FP runs out; the others share its part
    assert np.array_equal(picked, stratified_sample(stratum, 20, seed=0))
    assert len(stratified_sample(stratum, 500, seed=1)) == len(stratum)
    assert strata(np.array([1, 0, 0, 1]), np.array([1, 1, 0, 0]), ["neg", "pos"]).tolist() == \
        ["TP", "FP", "TN", "FN"]
    assert strata(np.array([2, 0]), np.array([2, 1]), ["a", "b", "c"]).tolist() == ["c: correct", "a: wrong"]


def _ratings(judge_name: str, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"judge": judge_name, "text_id": np.arange(len(values)) // 2,
                         "method": ["vqlc", "kmeans"] * (len(values) // 2), "role": "prediction",
                         "letter": ["A", "B", "B", "A"] * (len(values) // 4), "rating": values,
                         "parsed": ~np.isnan(values)})


def test_judges_who_agree_have_w_and_alpha_of_one_and_missing_ratings_are_left_out():
    assert kendalls_w(np.array([[1, 2, 3, 3], [1, 2, 3, 3]], dtype=float)) == pytest.approx(1.0)
    assert kendalls_w(np.array([[1, 2, 3], [3, 2, 1]], dtype=float)) == pytest.approx(0.0)
    values = [3, 1, 2, 1, 3, 2, 1, 1]
    same = pd.concat([_ratings("a", values), _ratings("b", values)])
    a = agreement(same)
    assert a["kendalls_w"] == pytest.approx(1.0) and a["krippendorff_alpha"] == pytest.approx(1.0)
    assert a["pairwise"]["a ~ b"]["spearman"] == pytest.approx(1.0)
    gap = pd.concat([_ratings("a", values), _ratings("b", [np.nan, np.nan] + values[2:])])
    b = agreement(gap)
    assert b["items_all_judges"] == 6 and b["pairwise"]["a ~ b"]["items"] == 6
    assert agreement(_ratings("a", values)) is None


def _lettered(rate) -> pd.DataFrame:
    """Ratings of 60 sentences, 4 methods each under seeded shuffled letters A-D, rated by
    `rate(method, letter)`."""
    rng = np.random.default_rng(0)
    rows = []
    for t in range(60):
        for letter, m in zip("ABCD", rng.permutation(["vqlc", "kmeans", "lacoat", "sae"])):
            rows.append({"text_id": t, "method": m, "role": "prediction", "letter": letter,
                         "rating": float(rate(m, letter)), "parsed": True})
    return pd.DataFrame(rows)


def test_a_judge_that_rates_by_letter_is_told_apart_from_one_that_reads_the_concepts():
    from vqlc_core.llm.agreement import position_effect

    by_letter = position_effect(_lettered(lambda m, letter: {"A": 3, "B": 1, "C": 2, "D": 1}[letter]))
    assert by_letter["eta_squared"] == pytest.approx(1.0)
    assert by_letter["by_letter"] == {"A": 3.0, "B": 1.0, "C": 2.0, "D": 1.0}

    ratings = _lettered(lambda m, letter: {"vqlc": 3, "kmeans": 2, "lacoat": 2, "sae": 1}[m])
    reader = position_effect(ratings)
    assert reader["eta_squared"] < 0.1  # letters are shuffled: they explain little of a reader's ratings
    alone = {m: mean for (_, m), mean in reader["from_letters"].items()}
    assert all(abs(v - ratings["rating"].mean()) < 0.3 for v in alone.values())  # letters alone: near the mean
    assert position_effect(ratings.assign(parsed=False)) is None


def _two_judges(rate_a, rate_b) -> pd.DataFrame:
    """Two judges' ratings of the same sentences under the same letters (`_lettered`)."""
    return pd.concat([_lettered(rate_a).assign(judge="a"), _lettered(rate_b).assign(judge="b")], ignore_index=True)


def test_judges_who_both_rate_by_the_letter_agree_only_through_their_shared_position_bias():
    both = _two_judges(lambda m, letter: {"A": 3, "B": 1, "C": 2, "D": 1}[letter],
                       lambda m, letter: {"A": 3, "B": 2, "C": 2, "D": 1}[letter])
    a = agreement(both)
    assert a["kendalls_w"] > 0.8 and a["pairwise"]["a ~ b"]["spearman"] > 0.6  # high, and all of it position
    assert a["letter_effect"] == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert a["position_biased"] == ["a", "b"] and a["shared_position_bias"]
    residual = a["residual"]  # each judge less its letter means: nothing is left to agree on
    assert residual["kendalls_w"] is None and residual["krippendorff_alpha"] is None
    assert residual["pairwise"]["a ~ b"]["spearman"] is None
    line = judge_results.agreement_line(a)
    assert "variance of a (100%) and b (100%)" in line and "reflects the position bias they share" in line
    assert "After removing each judge's mean rating per letter: Kendall's W = undefined" in line
    assert "no rating varies once the letters' means are removed" in line


def _reader(scores: dict):
    """A judge that rates each method's concept by `scores`, whatever its letter."""
    return lambda m, letter: scores[m]


def test_judges_who_read_the_concepts_keep_their_agreement_once_letter_means_are_removed():
    both = _two_judges(_reader({"vqlc": 3, "kmeans": 2, "lacoat": 2, "sae": 1}),
                       _reader({"vqlc": 3, "kmeans": 2, "lacoat": 1, "sae": 1}))
    a = agreement(both)
    assert all(v < 0.1 for v in a["letter_effect"].values())
    assert a["position_biased"] == [] and not a["shared_position_bias"]
    assert a["kendalls_w"] > 0.8 and a["residual"]["kendalls_w"] > 0.8
    assert abs(a["residual"]["pairwise"]["a ~ b"]["spearman"] - a["pairwise"]["a ~ b"]["spearman"]) < 0.1
    line = judge_results.agreement_line(a)
    assert "Letter effect (variance explained by the letter): a " in line and "position bias" not in line
    assert "undefined" not in line

    # one judge reading by letter is no shared bias: agreement is low and not put down to position
    mixed = _two_judges(lambda m, letter: {"A": 3, "B": 1, "C": 2, "D": 1}[letter],
                        _reader({"vqlc": 3, "kmeans": 2, "lacoat": 2, "sae": 1}))
    m = agreement(mixed)
    assert m["position_biased"] == ["a"] and not m["shared_position_bias"]
    assert "position bias" not in judge_results.agreement_line(m)


def test_a_judges_checks_say_in_words_what_could_not_be_measured():
    j = {"position": {"by_letter": {"A": 2.0, "B": 2.0}, "eta_squared": None}, "copied_reasons": None,
         "identical_rated_alike": None}
    checks = judge_results.judge_checks(j)
    assert "no identical concepts were judged" in checks and "it gave no reason" in checks
    assert "no letter effect can be measured" in checks and "–" not in checks
    j.update(position={"by_letter": {"A": 3.0, "B": 1.0}, "eta_squared": 0.8}, copied_reasons=0.25,
             identical_rated_alike=0.5)
    checks = judge_results.judge_checks(j)
    assert "explains 80% of the ratings' variance" in checks and "25% of its reasons" in checks
    assert "it rated 50% of identical concepts alike" in checks


def test_reasons_that_repeat_the_worked_example_are_counted():
    reasons = ["Positive words", "function words ", "it names the actors", None, "opposite opinion"]
    r = pd.DataFrame({"reason": reasons, "parsed": [True, True, True, True, False]})
    assert judge.copied_reasons(r) == pytest.approx(2 / 3)  # the unparsed and the empty are left out
    assert judge.copied_reasons(r.assign(parsed=False)) is None


# --- endpoints -------------------------------------------------------------------------------

def test_a_judge_spec_is_read_or_refused_in_one_sentence(monkeypatch):
    ep = parse_endpoint("name=v,url=http://127.0.0.1:8000/v1,model=m,key_env=VQLC_TEST_KEY,concurrency=2")
    assert (ep.name, ep.base_url, ep.model, ep.api_key_env, ep.concurrency) == \
        ("v", "http://127.0.0.1:8000/v1", "m", "VQLC_TEST_KEY", 2)
    for bad, phrase in (("url=http://x/v1", "lacks model"), ("name=v,url=ftp://x,model=m", "not an http"),
                        ("name=v,url=http://x/v1,model=m,colour=red", "Cannot read"),
                        ("name=v,url=http://x/v1,model=m,concurrency=two", "whole numbers")):
        with pytest.raises(RunError, match=phrase):
            parse_endpoint(bad)
    monkeypatch.delenv("VQLC_TEST_KEY", raising=False)
    with pytest.raises(RunError, match=r"\$VQLC_TEST_KEY, which is not set"):
        ep.api_key()
    monkeypatch.setenv("VQLC_TEST_KEY", "sk-secret")
    assert ep.api_key() == "sk-secret"


def test_a_request_is_keyed_by_what_decides_its_answer_and_never_by_the_key(monkeypatch):
    ep = parse_endpoint("name=v,url=http://127.0.0.1:8000/v1,model=m,key_env=VQLC_TEST_KEY")
    r = chat("sys", "question", max_tokens=5, temperature=0.7, seed=1)
    monkeypatch.setenv("VQLC_TEST_KEY", "one")
    k1 = request_key(ep, r)
    monkeypatch.setenv("VQLC_TEST_KEY", "two")
    assert request_key(ep, r) == k1
    assert request_key(ep, chat("sys", "question", max_tokens=5, temperature=0.7, seed=2)) != k1
    assert request_key(replace(ep, name="renamed"), r) == k1


def test_judge_and_label_explain_every_option():
    from tests.pipeline.test_cli import options, subcommands

    for command in ("judge", "label"):
        for a in options(subcommands()[command]):
            assert a.help and len(a.help.split()) >= 2, f"{command} {a.option_strings[0]} has no help"
    assert "key_env" in subcommands()["judge"].format_help()


class _Failing(BaseHTTPRequestHandler):
    """Answers every POST with the status of its server and counts them."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.hits += 1
        body = json.dumps({"error": {"message": "it went wrong"}}).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def failing_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    httpd.hits, httpd.status = 0, 500
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_server_that_answers_500_is_retried_then_ends_in_one_sentence(failing_server, tmp_path):
    port = failing_server.server_address[1]
    ep = Endpoint(name="broken", base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=2, backoff_s=0.01)
    client = ChatClient(ep, Records(tmp_path / "records"))
    with pytest.raises(RunError) as err:
        client.complete(chat("sys", "hello", max_tokens=3))
    message = str(err.value)
    assert "answered HTTP 500" in message and "3 times" in message and "\n" not in message, message
    assert failing_server.hits == 3 == client.tries
    assert Records(tmp_path / "records").count() == 0  # nothing recorded for a failure

    failing_server.status, failing_server.hits = 400, 0
    with pytest.raises(RunError, match=r"refused the request with HTTP 400 \(it went wrong\)"):
        ChatClient(ep, Records(tmp_path / "records")).complete(chat("sys", "hello", max_tokens=3))
    assert failing_server.hits == 1  # a 4xx other than 429 is not retried


@pytest.fixture
def private_run(apptest_run, tmp_path):
    """A private copy of the apptest run (links to its files, its own llm/ folder)."""
    return linked_copy(apptest_run.dir, tmp_path / "cache")


def test_an_unreachable_judge_ends_in_one_sentence_through_the_cli(private_run, tmp_path):
    port = free_port()  # nothing listens there
    code, _, err = run_cli("judge", "--run", "apptest", "--cache-dir", str(tmp_path / "cache"), "--n", "2",
                           "--methods", "vqlc", "--judge", f"name=down,url=http://127.0.0.1:{port}/v1,model=m")
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line.startswith("vqlc:")]
    assert lines == [f"vqlc: error: Cannot reach the judge endpoint http://127.0.0.1:{port}/v1: connection refused; "
                     "start the server or check --judge."], err
    assert "Traceback" not in err


# --- end to end with the real transformers serve ------------------------------------------------

@pytest.mark.slow
def test_a_judge_model_without_a_chat_template_is_named_before_any_work_is_sent(private_run, tmp_path):
    # A base model served as the README's server table shows: SmolLM2's directory with its chat
    # template removed completes text but answers every chat request with HTTP 500.
    source = Path(local_endpoint(CACHE).managed)
    model = tmp_path / "no-chat-template"
    model.mkdir()
    for item in source.iterdir():
        if item.name not in ("chat_template.jinja", "tokenizer_config.json"):
            (model / item.name).symlink_to(item)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with transformers_serve(model, tmp_path / "serve.log") as url:
        code, _, err = run_cli("judge", "--run", "apptest", "--cache-dir", str(tmp_path / "cache"), "--n", "2",
                               "--methods", "vqlc", "--judge", f"name=base,url={url},model={model}")
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line.startswith("vqlc:")]
    assert lines == [f"vqlc: error: The model {model} at {url} has no chat template, so it cannot answer chat requests: "
                     "serve a chat (instruct) model, or give this model's tokenizer a chat template."], err
    assert "Traceback" not in err and "HTTP 500" not in err
    assert Records(private_run.dir / "llm" / "records").count() == 0  # refused before any judging request


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The offline default judge, started once for this module with the real SmolLM2-135M-Instruct."""
    ep = local_endpoint(CACHE)
    with transformers_serve(ep.managed, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield started(ep, url)


@pytest.fixture(scope="module")
def clean_judgement(server, apptest_run, tmp_path_factory):
    """One uninterrupted judge run on a private copy: (the run, its results, its ratings)."""
    run = linked_copy(apptest_run.dir, tmp_path_factory.mktemp("clean") / "cache")
    res = judge.run_judges(run, [server], n=N, seed=0, methods=METHODS)
    return run, res, pd.read_parquet(run.dir / "llm" / "judge_ratings.parquet")


@pytest.mark.slow
def test_every_answer_is_parsed_or_counted_and_a_rerun_sends_nothing(server, clean_judgement):
    run, res, ratings = clean_judgement
    j = res["judges"][server.name]
    assert res["requests"][server.name] == {"sent": N, "from_record": 0}
    assert j["parsed"] + j["unparseable"] == j["requests"] == N
    assert ratings["parsed"].sum() == 2 * len(METHODS) * j["parsed"]  # every letter of a parsed answer
    assert ratings.loc[ratings["parsed"], "rating"].isin([1, 2, 3]).all()
    assert ratings.loc[~ratings["parsed"], "rating"].isna().all()
    assert set(res["strata"]) == {"TP", "FP", "TN", "FN"}
    assert sorted(ratings["role"].unique()) == ["prediction", "salient"]
    assert Records(run.dir / "llm" / "records").count() == N
    saved = json.loads((run.dir / "llm" / "judge.json").read_text())
    assert saved["judges"][server.name]["parse_rate"] == j["parse_rate"]

    run.explainer = lambda *a, **kw: pytest.fail("the rerun explained the sentences again")  # items are kept
    again = judge.run_judges(run, [server], n=N, seed=0, methods=METHODS)
    del run.explainer
    assert again["requests"][server.name] == {"sent": 0, "from_record": N}
    assert again["judges"] == res["judges"]
    pd.testing.assert_frame_equal(pd.read_parquet(run.dir / "llm" / "judge_ratings.parquet"), ratings)


@pytest.mark.slow
def test_two_judges_are_compared_by_their_agreement(server, clean_judgement, apptest_run, tmp_path):
    run = linked_copy(apptest_run.dir, tmp_path / "cache")
    shutil.copytree(clean_judgement[0].dir / "llm" / "records", run.dir / "llm" / "records")
    twin = replace(server, name="twin")  # the same model: answered from the record, nothing sent
    both = judge.run_judges(run, [server, twin], n=N, seed=0, methods=METHODS)
    assert both["requests"]["twin"] == {"sent": 0, "from_record": N}
    a = both["agreement"]
    assert a is not None and a["judges"] == [server.name, "twin"]
    assert {"pairwise", "kendalls_w", "krippendorff_alpha", "disagreement"} <= set(a)
    assert "Kendall's W" in judge_results.judge_table(both)


@pytest.mark.slow
def test_a_killed_judge_resumes_and_sends_only_what_was_missing(server, clean_judgement, apptest_run, tmp_path):
    _, _, clean = clean_judgement
    run = linked_copy(apptest_run.dir, tmp_path / "cache")
    spec = f"name={server.name},url={server.base_url},model={server.model},concurrency=1"
    records = Records(run.dir / "llm" / "records")
    cmd = [sys.executable, "-m", "vqlc_core", "judge", "--run", "apptest", "--cache-dir", str(tmp_path / "cache"),
           "--n", str(N), "--seed", "0", "--methods", *METHODS, "--judge", spec]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900  # a bound on a stuck run, not a timing the test relies on
        while proc.poll() is None and records.count() == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    answered = records.count()
    assert answered >= 1

    res = judge.run_judges(run, [parse_endpoint(spec)], n=N, seed=0, methods=METHODS)
    assert res["requests"][server.name] == {"sent": N - answered, "from_record": answered}
    resumed = pd.read_parquet(run.dir / "llm" / "judge_ratings.parquet")
    pd.testing.assert_frame_equal(resumed, clean)  # as if it had never stopped


@pytest.mark.slow
def test_labels_are_written_kept_when_edited_and_not_asked_again(server, private_run):
    run = private_run
    concepts = run.concept_set("vqlc")
    two = sorted(int(k) for k in np.argsort(-concepts.sizes, kind="stable")[:2])
    res = labelling.label_method(run, "vqlc", server, ids=two, n_contexts=5, n_held_out=1, max_tokens=48)
    named = [k for k in two if res["entries"][k]["name"]]
    assert res["sent"] == 3 * len(two) + 2 * len(named) and res["from_record"] == 0
    saved = labels.load_labels(run.dir, "vqlc")
    for k in two:
        e = saved[k]
        assert len(e["samples"]) == 3 and e["unparseable"] == sum(s is None for s in e["samples"])
        assert (e["name"] is None) == (e["agreement"] < 2) and e["edited"] is False
        assert (e["detection"] is None) == (e["name"] is None)
        assert labels.label_of(run.dir, "vqlc", k) == e["name"]

    labels.set_label(run.dir, "vqlc", two[0], "  my   own name ", "what I saw")
    again = labelling.label_method(run, "vqlc", server, ids=two, n_contexts=5, n_held_out=1, max_tokens=48)
    assert again["sent"] == 0 and again["edited_kept"] == [two[0]]
    kept = labels.load_labels(run.dir, "vqlc")[two[0]]
    assert kept["edited"] is True and kept["name"] == "my own name" and kept["detection"] is None
    assert labels.label_of(run.dir, "vqlc", two[0]) == "my own name"
    assert labels.load_labels(run.dir, "vqlc")[two[1]] == saved[two[1]]


@pytest.mark.slow
def test_a_label_is_scored_by_detection_on_held_out_contexts(server, private_run):
    run = private_run
    concepts = run.concept_set("vqlc")
    k = int(np.argmax(concepts.sizes))
    sample = contexts.sample_rows(concepts.assignments, run.store.tokens, k, "word", 5, 1, seed=0)
    assert len(sample.members) == len(sample.others) == 1
    assert not set(sample.members) & set(sample.shown)  # held out: never shown to write the label
    assert (concepts.assignments[sample.others] != k).all()
    entries = {k: {"name": "common words", "description": "Frequent short words."}}
    requests, where = detection.detection_requests(entries, {k: sample}, run.texts, run.store.tokens)
    assert where == [(k, True), (k, False)]
    said = [detection.parse_yes_no(a.content) for a in ChatClient(server, Records(run.dir / "llm" / "records"))
            .complete_many(requests)]
    score = detection.detection_scores(where, said)[k]
    assert (score["members"], score["non_members"]) == (1, 1)
    assert score["unparseable"] == sum(s is None for s in said)
    assert score["balanced_accuracy"] in (None, 0.0, 0.5, 1.0)


@pytest.mark.slow
def test_the_judges_and_labels_pages_show_each_judge_its_ratings_with_reasons_and_the_labels(server, clean_judgement,
                                                                                 apptest_run, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    judged, res, ratings = clean_judgement
    run = linked_copy(apptest_run.dir, tmp_path / "cache")
    shutil.copytree(judged.dir / "llm", run.dir / "llm")
    k = int(np.argmax(run.concept_set("vqlc").sizes))
    labelling.label_method(run, "vqlc", server, ids=[k], n_contexts=5, n_held_out=1, max_tokens=48)
    entry = labels.load_labels(run.dir, "vqlc")[k]

    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(str(ROOT / "pages" / "judges.py"), default_timeout=120)
    at.session_state["run"] = "apptest"
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    j = res["judges"][server.name]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Parse rate"] == f"{j['parse_rate']:.0%}" and metrics["Sentences rated"] == str(j["parsed"])
    eta = (j["position"] or {}).get("eta_squared")
    assert metrics["Variance explained by the letter"] == ("–" if eta is None else f"{eta:.0%}")
    assert any("weak judge" in w.value for w in at.warning)  # the offline default says what it is
    table = at.dataframe[0].value
    assert len(table) == len(j["table"]) and table["mean"].tolist() == [r["mean"] for r in j["table"]]

    box = at.selectbox(key="judged_sentence")
    assert sorted(box.options) == sorted(box.format_func(t) for t in ratings["text_id"].unique())
    for tid in ratings["text_id"].unique():
        box.set_value(int(tid)).run()
        shown = at.dataframe[1].value  # one judge: one table of this sentence's ratings
        want = ratings[ratings["text_id"] == tid].sort_values("letter")
        assert shown["letter"].tolist() == want["letter"].tolist()
        assert shown["reason"].fillna("").tolist() == want["reason"].fillna("").tolist()
        assert shown["rating"].dropna().tolist() == want["rating"].dropna().tolist()
        unparsed = any("could not be parsed" in c.value for c in at.caption)
        assert unparsed == (not want["parsed"].any())

    assert at.title[0].value == "LLM judges" and not any("offline default, SmolLM2" in w.value for w in at.warning)

    at = AppTest.from_file(str(ROOT / "pages" / "labels.py"), default_timeout=120)
    at.session_state["run"] = "apptest"
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert any("These labels were written and scored by the offline default" in w.value for w in at.warning)
    (labelled,) = [d.value.set_index("concept") for d in at.dataframe]
    assert labelled.loc[k, "status"] == entry["status"] and not labelled.loc[k, "edited"]
    det = (entry["detection"] or {}).get("balanced_accuracy")
    assert (pd.isna(labelled.loc[k, "detection"]) if det is None else labelled.loc[k, "detection"] == det)
