"""Many sessions on one server, on the real apptest run (MiniLM and its concept methods):
explanations and ablations computed together in one batch equal the same ones computed one by
one, requests are served first come first served, a request whose session left is never
computed, and a bad input fails alone. Batches are made deterministic by holding the model's
lock while requests queue, never by timing."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vqlc_core.explain.serving import Batcher, ExplainService, SessionLeft

TEXTS = ["a charming and often affecting journey .",
         "the plot is thin but the actors seem to enjoy themselves",
         "dull",
         "an utterly lifeless , tedious exercise in style over substance that never finds its footing",
         "i laughed , i cried , and then i wondered why i had bothered at all",
         "it 's a gorgeous film ."]


@pytest.fixture(scope="module")
def explainer(apptest_run):
    return apptest_run.explainer()


def fresh(explainer):
    explainer._cache.clear()  # every pass computed anew, in the batch under test
    return explainer


def assert_same_explanation(a: dict, b: dict) -> None:
    assert (a["text"], a["prediction"], a["words"]) == (b["text"], b["prediction"], b["words"])
    assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    np.testing.assert_allclose(a["attributions"], b["attributions"], atol=1e-4)
    assert [s["index"] for s in a["salient"]] == [s["index"] for s in b["salient"]]
    for m in a["methods"]:
        assert a["methods"][m]["word_concepts"] == b["methods"][m]["word_concepts"]
        pa, pb = a["methods"][m]["prediction_concepts"], b["methods"][m]["prediction_concepts"]
        assert [c["concept"] for c in pa] == [c["concept"] for c in pb]
        np.testing.assert_allclose([c["probability"] for c in pa], [c["probability"] for c in pb], atol=1e-5)


def hold_worker(service: ExplainService, text: str):
    """Submit `text` and return (its future, the held lock) once the worker is computing it and
    blocked on the model's lock: whatever is submitted next queues behind it."""
    lock = service.explainer.backbone.lock
    lock.acquire()
    first = service.batcher.submit("explain", text)
    while not first.running():  # set by the worker as it starts the batch, before it takes the lock
        threading.Event().wait(0.005)
    return first, lock


def test_explanations_batched_together_equal_the_same_explanations_one_by_one(explainer):
    alone = [fresh(explainer).explain(t).to_dict() for t in TEXTS]
    together = [e.to_dict() for e in fresh(explainer).explain_many(TEXTS)]
    assert len(together) == len(TEXTS)
    for a, b in zip(alone, together):
        assert_same_explanation(a, b)


def test_concurrent_sessions_are_answered_in_one_batch_like_one_by_one(explainer):
    alone = {t: fresh(explainer).explain(t).to_dict() for t in TEXTS}
    service = ExplainService(fresh(explainer), max_batch=16)
    first, lock = hold_worker(service, TEXTS[0])
    answers = {}
    threads = [threading.Thread(target=lambda t=t: answers.__setitem__(t, service.explain(t))) for t in TEXTS[1:]]
    for th in threads:
        th.start()
    while service.batcher._queue.qsize() < len(TEXTS) - 1:  # every session's request is queued
        threading.Event().wait(0.005)
    lock.release()
    for th in threads:
        th.join()
    answers[TEXTS[0]] = first.result()
    assert service.batcher.batches == [1, len(TEXTS) - 1]
    for t in TEXTS:
        assert_same_explanation(answers[t], alone[t])


def test_ablations_batched_together_equal_the_same_ablations_one_by_one(explainer):
    ex = {t: explainer.explain(t).to_dict() for t in TEXTS}
    requests = [(t, m, [c["concept"] for c in ex[t]["methods"][m]["prediction_concepts"][:2]], True)
                for t in TEXTS for m in ("vqlc", "kmeans")]
    alone = [fresh(explainer).ablate(*r) for r in requests]
    together = fresh(explainer).ablate_many(requests)
    for a, b in zip(alone, together):
        assert a.prediction == b.prediction
        assert a.delta == pytest.approx(b.delta, abs=1e-5)
        assert a.proba == pytest.approx(b.proba, abs=1e-5)


def test_requests_are_served_first_come_first_served_across_sessions(explainer):
    service = ExplainService(explainer, max_batch=2)
    done = []
    first, lock = hold_worker(service, TEXTS[0])
    futures = [service.batcher.submit("explain", t) for t in TEXTS[1:]]
    for f, t in zip(futures, TEXTS[1:]):
        f.add_done_callback(lambda _, t=t: done.append(t))
    lock.release()
    for f in futures:
        f.result()
    assert done == TEXTS[1:] and service.batcher.batches == [1, 2, 2, 1]


def test_a_request_whose_session_left_is_never_computed(explainer):
    service = ExplainService(explainer)
    first, lock = hold_worker(service, TEXTS[0])
    left = []

    def leaving_session():
        try:
            service.explain(TEXTS[1], alive=lambda: False)
        except SessionLeft as e:
            left.append(str(e))

    th = threading.Thread(target=leaving_session)
    th.start()
    th.join()  # it gave up while the worker was still busy with the first request
    lock.release()
    first.result()
    assert service.explain(TEXTS[2])["text"] == TEXTS[2]
    assert left == ["The session left before its answer was computed."]
    assert service.batcher.dropped == 1 and sum(service.batcher.batches) == 2


def test_a_bad_input_fails_alone_and_the_rest_of_its_batch_is_answered(explainer):
    service = ExplainService(explainer)
    first, lock = hold_worker(service, TEXTS[0])
    good, empty = service.batcher.submit("explain", TEXTS[1]), service.batcher.submit("explain", "   ")
    bad_ids = service.batcher.submit("ablate", TEXTS[1], "vqlc", [10_000])
    lock.release()
    assert good.result()["text"] == TEXTS[1]
    with pytest.raises(ValueError, match="empty"):
        empty.result()
    with pytest.raises(ValueError, match="outside vqlc's concepts"):
        bad_ids.result()


def test_the_batcher_refuses_an_unknown_kind_and_a_batch_size_below_one():
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        Batcher({"explain": list}, max_batch=0)
    with pytest.raises(ValueError, match="Unknown request kind 'train'; choose one of explain."):
        Batcher({"explain": list}).submit("train")


def test_every_answer_is_recorded_with_its_wait_and_compute_time(explainer, tmp_path):
    import json

    path = tmp_path / "stats.jsonl"
    service = ExplainService(explainer, stats_path=path)
    service.explain(TEXTS[3])
    service.ablate(TEXTS[3], "vqlc", [0])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["explain", "ablate"]
    assert all(r["wait_s"] >= 0 and r["compute_s"] > 0 and r["cpu_s"] >= 0 and r["batch"] == 1 for r in rows)
