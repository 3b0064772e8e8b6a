"""The TopK sparse autoencoder as a concept method, on the real MiniLM states of the apptest run:
held-out reconstruction, its decoder rows as ablation directions, resume after a kill, save and
load, and the comparison with the clustering methods."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import CACHE, ROOT, run_cli
from vqlc_core.explain.ablation import ablate
from vqlc_core.data.backbone import capture
from vqlc_core.base.checkpoint import CHECKPOINT_FILE, read_meta
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.pipeline.config import MethodsConfig
from vqlc_core.methods.metrics import R2Accumulator
from vqlc_core.base.runio import RunError
from vqlc_core.methods.sae import SAEConcepts
from vqlc_core.evaluate.sae_compare import compare, load, markdown, write

SMALL = dict(n_concepts=256, k=8, batch_size=128, min_steps=300, progress=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread: float sums in a fixed order (the killed fit runs in a one-thread process) and
    no spinning on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def fitset(apptest_run):
    return np.load(apptest_run.dir / "fitset.npy")


@pytest.fixture(scope="module")
def sae(apptest_run, fitset):
    return SAEConcepts(**SMALL).fit(apptest_run.store, rows=fitset)


@pytest.fixture(scope="module")
def sae_concepts(apptest_run, sae):
    store = apptest_run.store
    return ConceptSet.from_assignments("sae", store, sae.predict_store(store), sae.n_concepts,
                                       apptest_run.class_names, extra=sae.concept_extra())


def test_the_sae_reconstructs_held_out_rows_better_than_their_mean(apptest_run, sae, fitset):
    store = apptest_run.store
    dev = store.rows_where(split="dev")
    X = store.read(dev)
    mean = store.read(fitset).mean(0)  # the best constant the fit rows know of
    by_mean, by_sae = R2Accumulator(), R2Accumulator()
    by_mean.update(X, np.broadcast_to(mean, X.shape))
    by_sae.update(X, sae.reconstruct(X))
    assert by_sae.value() > by_mean.value() + 0.3
    assert sae.score_store(store, dev)["r2"] == pytest.approx(by_sae.value(), abs=1e-6)


def test_every_row_uses_k_latents_and_its_concept_is_the_most_active(apptest_run, sae):
    X = apptest_run.store.read(np.arange(200))
    acts, idx = sae.encode(X)
    assert acts.shape == idx.shape == (200, 8) and (acts >= 0).all()
    dense = sae.transform(X)
    assert dense.shape == (200, 256) and ((dense > 0).sum(1) <= 8).all()
    np.testing.assert_array_equal(sae.predict(X), dense.argmax(1))
    p = sae.predict_proba(X)
    assert np.allclose(p.sum(1), 1.0, atol=1e-5) and np.array_equal(p.argmax(1), dense.argmax(1))


def test_a_concepts_direction_is_its_unit_decoder_row_through_the_concept_set(sae, sae_concepts):
    ids = np.flatnonzero(sae_concepts.sizes > 0)[:5]
    w = sae.model_.coder.W_dec.detach().numpy()[ids]
    np.testing.assert_allclose(sae_concepts.directions(ids), w / np.linalg.norm(w, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(sae_concepts.directions(ids, centred=False), sae_concepts.vectors[ids])


def test_ablating_a_features_direction_leaves_the_layer_l_states_orthogonal_to_it(apptest_run, minilm, sae,
                                                                                  sae_concepts):
    layer = apptest_run.layer
    enc, _ = minilm.tokenize(["the film is a charming and often affecting journey ."])
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    with torch.no_grad(), capture(minilm, layer) as got:
        minilm.base(**enc)
    k = int(np.bincount(sae.predict(got["h"][0].numpy())).argmax())  # the sentence's most common feature
    d = torch.as_tensor(sae_concepts.directions([k])[0])
    assert (got["h"][0] @ d).abs().max() > 0.5  # the feature is there before
    with torch.no_grad(), ablate(minilm, layer, sae_concepts.directions([k])), capture(minilm, layer) as after:
        minilm.base(**enc)
    assert (after["h"][0] @ d).abs().max() < 1e-4


def test_the_top_activation_table_holds_each_features_largest_activations_over_the_rows(apptest_run, sae):
    from vqlc_core.evaluate.features import top_activations

    store = apptest_run.store
    rows = store.rows_where(split="train", kind="word")
    top = top_activations(sae, store, rows, n=5, batch_size=1000)  # several batches: the running top is merged
    dense = sae.transform(store.read(rows))
    fired = np.flatnonzero((dense > 0).any(0))
    assert sorted(top["concept"].unique()) == fired.tolist()
    for k in fired[:: max(1, len(fired) // 25)]:
        mine = top[top["concept"] == k].sort_values("rank")
        want = np.sort(dense[:, k][dense[:, k] > 0])[::-1][:5]
        np.testing.assert_allclose(mine["activation"], want, rtol=1e-5)
        assert mine["rank"].tolist() == list(range(len(want))) and set(mine["row"]) <= set(rows)
        np.testing.assert_allclose(dense[np.searchsorted(rows, mine["row"]), k], mine["activation"], rtol=1e-5)


def test_a_features_contexts_give_its_activation_on_every_word_of_the_sentence(apptest_run, sae):
    from vqlc_core.evaluate.features import activation_html, feature_contexts, top_activations

    store = apptest_run.store
    top = top_activations(sae, store, store.rows_where(split="train", kind="word"), n=4)
    k = int(top["concept"].value_counts().index[0])
    ctx = feature_contexts(sae, store, apptest_run.texts, top, k)
    assert len(ctx) == 4 and [c["activation"] for c in ctx] == sorted((c["activation"] for c in ctx), reverse=True)
    for c, r in zip(ctx, top[top["concept"] == k].sort_values("rank").itertuples()):
        assert len(c["activations"]) == len(c["words"]) == len(c["spans"])
        assert c["words"][c["peak"]] == store.tokens.at[r.row, "word"]
        assert c["activations"][c["peak"]] == pytest.approx(r.activation, rel=1e-5)
        assert max(c["activations"]) == pytest.approx(c["activation"], rel=1e-5)  # no word of it is more active
    page = activation_html(ctx[0], ctx[0]["activation"])
    assert page.count('title="activation ') == sum(a > 0 for a in ctx[0]["activations"]) and "<b>" in page
    evil = {"text": "<img src=x> fine", "spans": [(0, 11), (12, 16)], "activations": [1.0, 0.5], "peak": 0}
    assert "<img" not in activation_html(evil, 1.0) and "&lt;img src=x&gt;" in activation_html(evil, 1.0)


_KILLED_FIT = """
import json, sys, torch
torch.set_num_threads(1)
from vqlc_core.pipeline.run import Run
from vqlc_core.methods.sae import SAEConcepts
import numpy as np
run = Run(sys.argv[1])
SAEConcepts(**json.loads(sys.argv[2]), checkpoint_dir=sys.argv[3]).fit(run.store, rows=np.load(run.dir / "fitset.npy"))
"""


def test_a_killed_training_resumes_to_the_weights_of_an_uninterrupted_one(apptest_run, fitset, tmp_path):
    """Killed with SIGKILL after its first checkpoint, the fit is resumed and ends with the
    uninterrupted fit's weights (equal up to 1e-6: both run on one thread, in the same order)."""
    params = {**SMALL, "epochs": 30}  # long enough that the kill lands well before the end
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = [str(apptest_run.dir), json.dumps(params), str(tmp_path)]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_FIT, *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not (tmp_path / CHECKPOINT_FILE).exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() - t0 < 300, "no checkpoint within 300 s"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    done = read_meta(tmp_path / CHECKPOINT_FILE)["epoch"]
    assert 1 <= done < 30, "the kill came too late to test a resume"
    resumed = SAEConcepts(**params, checkpoint_dir=str(tmp_path)).fit(apptest_run.store, rows=fitset)
    whole = SAEConcepts(**params).fit(apptest_run.store, rows=fitset)
    for (name, a), b in zip(resumed.model_.state_dict().items(), whole.model_.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=f"{name} differs after the resume")
    assert [h["epoch"] for h in resumed.history_] == list(range(1, 31))


def test_a_checkpoint_of_another_k_is_refused_with_what_to_do(apptest_run, fitset, tmp_path):
    SAEConcepts(**{**SMALL, "epochs": 1}, checkpoint_dir=str(tmp_path)).fit(apptest_run.store, rows=fitset)
    with pytest.raises(RunError, match=r"other settings \(k\); delete it or pass --rebuild sae\.$"):
        SAEConcepts(**{**SMALL, "k": 4}, checkpoint_dir=str(tmp_path)).fit(apptest_run.store, rows=fitset)


def test_a_saved_sae_loads_and_encodes_identically(apptest_run, sae, tmp_path):
    sae.save(tmp_path / "m")
    back = SAEConcepts.load(tmp_path / "m")
    X = apptest_run.store.read(np.arange(300))
    for a, b in zip(back.encode(X), sae.encode(X)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.reconstruct(X), sae.reconstruct(X))
    np.testing.assert_array_equal(back.concept_extra()["directions"], sae.concept_extra()["directions"])
    assert back.get_params() == sae.get_params() and back.history_ == sae.history_


def test_the_build_config_sets_latents_and_k_and_refuses_k_above_them(tmp_path):
    m = SAEConcepts.from_config(MethodsConfig.of(sae_latents=64, sae_k=4), seed=3, workdir=tmp_path)
    assert (m.n_concepts, m.k, m.seed, m.checkpoint_dir) == (64, 4, 3, str(tmp_path / "checkpoint"))
    with pytest.raises(RunError, match="--sae-latents must be at least 33, got 32"):
        MethodsConfig.of(sae_latents=32, sae_k=32)


def test_the_comparison_measures_every_method_of_the_run_alike(apptest_run, sae, sae_concepts, tmp_path):
    methods = {m: (apptest_run.method(m), apptest_run.concept_set(m)) for m in apptest_run.methods_built()}
    result = compare(apptest_run, {**methods, "sae": (sae, sae_concepts)})
    r = result["methods"]
    assert set(r) == {"vqlc", "kmeans", "lacoat", "sae"}
    for m in ("vqlc", "kmeans", "lacoat"):
        assert r[m]["l0"] == 1.0 and r[m]["n_features"] == 20  # the word concepts: no prediction concept fires on words
        assert r[m]["dev_r2"] == r[m]["dev_centroid_r2"]
    assert 1.0 < r["sae"]["l0"] <= 8.0
    # The mean share of test sentences a feature fires on is the mean number of distinct
    # features of a test sentence's words over the number of features.
    tokens = apptest_run.store.tokens
    words = tokens[(tokens["split"] == "test") & (tokens["kind"] == "word")]
    kmeans = pd.Series(methods["kmeans"][1].assignments[words.index], index=words["text_id"])
    assert r["kmeans"]["fire_share_mean"] == pytest.approx(kmeans.groupby(level=0).nunique().mean() / 20)
    acts, idx = sae.encode(apptest_run.store.read(words.index.to_numpy()))
    distinct = [len(set(idx[rows][acts[rows] > 0])) for rows in words.reset_index().groupby("text_id").indices.values()]
    assert r["sae"]["fire_share_mean"] == pytest.approx(np.mean(distinct) / 256)
    assert r["sae"]["dev_r2"] > max(r[m]["dev_r2"] for m in methods)  # 8 latents reconstruct better than one centroid
    for m, v in r.items():
        assert 0.0 <= v["dead_fraction"] < 1.0 and 0.0 <= v["fire_share_median"] <= v["fire_share_p90"] <= 1.0
        p = v["probe"]
        assert 0.0 <= p["accuracy"] <= 1.0 and 1 <= p["n_for_90"] <= p["n_features_used"] <= v["n_features"]
        assert p["curve"][-1] == [p["n_features_used"], p["accuracy"]]
    table = markdown(result)
    assert table.count("\n") == 2 + 4 and "| sae | 256 |" in table


def test_a_written_comparison_is_dropped_when_a_method_was_rebuilt(apptest_run, tmp_path):
    from tests.runcopy import sealed_copy

    run = sealed_copy(apptest_run.dir, tmp_path / "cache")
    methods = {"kmeans": (run.method("kmeans"), run.concept_set("kmeans"))}
    write(run, compare(run, methods))
    assert load(run)["methods"]["kmeans"]["l0"] == 1.0
    run.manifest.data["stages"]["kmeans"]["files"]["methods/kmeans/assignments.npy"]["sha256"] = "0" * 64
    assert load(run) is None


@pytest.fixture(scope="module")
def sae_run(apptest_run, tmp_path_factory):
    """A private copy of the apptest run with a small SAE built into it, and its evaluation and
    maps again."""
    from tests.runcopy import sealed_copy
    from vqlc_core.pipeline.build import build

    run = sealed_copy(apptest_run.dir, tmp_path_factory.mktemp("cache"))
    cfg = run.rebuild_config().replace(methods=("vqlc", "kmeans", "lacoat", "sae"), sae_latents=128, sae_k=4)
    return build(cfg, stages=["sae", "evaluate", "maps"], rebuild="evaluate")


@pytest.mark.slow
def test_a_build_with_the_sae_gives_the_explainer_and_the_evaluation_its_features(sae_run):
    run = sae_run
    assert "sae" in run.methods_built() and not (run.method_dir("sae") / "checkpoint").exists()
    method, cs = run.method("sae"), run.concept_set("sae")
    # 128 latents for the words and, by default, a second dictionary for the prediction rows
    kp = run.cfg.methods.prediction_concepts
    assert (method.n_word_concepts, method.k, cs.n_concepts) == (128, 4, 128 + kp)
    np.testing.assert_array_equal(cs.directions([0, 5]), method.concept_extra()["directions"][[0, 5]])
    ex = run.explainer().explain("a charming and often affecting journey .")
    assert len(ex.methods["sae"].word_concepts) == len(ex.words)
    assert len(ex.methods["sae"].prediction_concepts) == 5
    faith = run.faithfulness()
    sae_rows = faith[faith["method"] == "sae"]
    from vqlc_core.evaluate.faithfulness import ALL_TARGETS

    assert set(sae_rows["target"]) == set(ALL_TARGETS)  # the energy-matched controls included
    assert (sae_rows["mean_energy"] >= 0).all()
    measures = run.measures()["methods"]["sae"]
    assert measures["dev_l0"] == 4.0 and 0 < measures["dev_r2"] < 1


@pytest.mark.slow
def test_the_command_writes_the_comparison_that_the_compare_page_shows(sae_run, monkeypatch):
    from streamlit.testing.v1 import AppTest

    cache = sae_run.dir.parent.parent
    code, out, err = run_cli("sae-compare", "--run", sae_run.dir.name, "--cache-dir", str(cache))
    assert code == 0, err
    assert out.startswith("| method |") and out.count("\n") == 2 + 4 and "| sae | 128 | 4.0 |" in out
    assert set(load(sae_run)["methods"]) == {"vqlc", "kmeans", "lacoat", "sae"}
    monkeypatch.setenv("VQLC_CACHE_DIR", str(cache))
    at = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=120)
    at.session_state["run"], at.session_state["method"] = sae_run.dir.name, "vqlc"
    at.session_state["text"] = "the plot is thin but the actors seem to enjoy themselves"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Against SAE features" in [t.label for t in at.tabs]  # a tab of the per-method figures
    assert not any(m.value.strip() == out.strip() for m in at.markdown)  # Compare draws only its open tab
    at.session_state["compare_tab"] = "Against SAE features"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.value.strip() == out.strip() for m in at.markdown)


@pytest.mark.slow
def test_the_concepts_page_shows_an_sae_feature_by_its_top_activating_contexts(sae_run, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from vqlc_core.evaluate.features import read_top

    top = read_top(sae_run.dir, "sae")
    assert top is not None and read_top(sae_run.dir, "vqlc") is None  # clusters have no activations
    k = int(top["concept"].value_counts().index[0])
    monkeypatch.setenv("VQLC_CACHE_DIR", str(sae_run.dir.parent.parent))
    at = AppTest.from_file(str(ROOT / "pages" / "concepts.py"), default_timeout=120)
    at.session_state["run"], at.session_state["method"] = sae_run.dir.name, "sae"
    at.session_state["concept"], at.session_state["concept_method"] = k, "sae"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown if m.value.startswith("**Top-activating contexts**")]
    assert len(shown) == 1 and shown[0].count("\n- `") == (top["concept"] == k).sum()
    assert 'title="activation ' in shown[0] and "<b>" in shown[0]


def test_the_command_says_how_to_build_the_sae_when_a_run_has_none(apptest_run):
    code, out, err = run_cli("sae-compare", "--run", "apptest", "--cache-dir", str(CACHE))
    assert code == 2 and not out
    assert err.strip() == ("vqlc: error: Run 'apptest' has no SAE built; build it with the run's own options plus "
                           "`--methods vqlc kmeans lacoat sae --rebuild evaluate`.")
