"""Tests of the VQLC estimator: training from a streamed store, determinism, resume, save/load."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vqlc_core.base.checkpoint import CHECKPOINT_FILE
from vqlc_core.pipeline.config import MethodsConfig
from vqlc_core.methods.metrics import vqlc_measures
from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore
from vqlc_core.methods.vq import VQModel
from vqlc_core.methods.vqlc import VQLC

SMALL = dict(n_concepts=8, epochs=3, batch_size=64, hidden=16, init_sample=500, lr=2e-3, progress=False)


def clustered(n=1200, d=12, k=8, seed=0) -> np.ndarray:
    """n rows around k well-separated centres, plus one dimension with huge values."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    x = centres[rng.integers(k, size=n)] + rng.normal(scale=0.3, size=(n, d))
    x[:, 0] *= 100.0  # a massive activation
    return x.astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models train fastest on one thread; two threads on a busy machine spin and wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def store():
    return ArrayStore(clustered(), chunk_rows=500)


@pytest.fixture(scope="module")
def fitted(store):
    return VQLC(**SMALL).fit(store)


def test_fit_returns_the_estimator_with_its_fitted_state(fitted):
    assert isinstance(fitted, VQLC)
    assert len(fitted.history_) == 3
    assert set(fitted.history_[0]) >= {"loss", "rec", "commit", "perplexity", "dead_codes"}
    assert fitted.mean_.shape == fitted.scale_.shape == (12,)
    assert fitted.fit_info_["fit_time_s"] > 0 and fitted.fit_info_["n_fit_rows"] == 1200


def test_the_loss_falls_on_clustered_data(store):
    model = VQLC(**{**SMALL, "epochs": 4}).fit(store)
    assert model.history_[-1]["loss"] < model.history_[0]["loss"]
    assert model.history_[-1]["perplexity"] > 6


def test_predict_returns_the_nearest_code(fitted, store):
    X = store.read(np.arange(300))
    z = fitted.transform(X)
    expected = ((z[:, None, :] - fitted.codebook_[None]) ** 2).sum(-1).argmin(1)
    assert fitted.predict(X).dtype == np.int64
    assert np.array_equal(fitted.predict(X), expected)
    assert np.array_equal(fitted.predict(torch.from_numpy(X)), expected)


def test_two_fits_with_the_same_seed_are_identical(fitted, store):
    again = VQLC(**SMALL).fit(store)
    assert torch.equal(again.model_.codebook.embed, fitted.model_.codebook.embed)
    for a, b in zip(again.model_.parameters(), fitted.model_.parameters()):
        assert torch.equal(a, b)


def test_a_fit_with_another_seed_differs(fitted, store):
    other = VQLC(**{**SMALL, "seed": 1}).fit(store)
    assert not torch.equal(other.model_.codebook.embed, fitted.model_.codebook.embed)


def test_a_killed_and_resumed_fit_equals_an_uninterrupted_one(fitted, store, tmp_path):
    VQLC(**{**SMALL, "epochs": 1}, checkpoint_dir=str(tmp_path)).fit(store)  # killed after epoch 1
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]
    resumed = VQLC(**SMALL, checkpoint_dir=str(tmp_path)).fit(store)
    assert torch.equal(resumed.model_.codebook.embed, fitted.model_.codebook.embed)
    for a, b in zip(resumed.model_.state_dict().values(), fitted.model_.state_dict().values()):
        assert torch.equal(a, b)
    assert resumed.history_ == fitted.history_


def test_a_checkpoint_written_with_another_beta_is_refused_with_what_to_do(store, tmp_path):
    VQLC(**{**SMALL, "epochs": 1}, checkpoint_dir=str(tmp_path)).fit(store)
    with pytest.raises(RunError, match=r"other settings \(beta\); delete it or pass --rebuild vqlc\.$"):
        VQLC(**{**SMALL, "beta": 0.5}, checkpoint_dir=str(tmp_path)).fit(store)


def test_a_checkpoint_of_vectors_of_another_width_is_refused(store, tmp_path):
    VQLC(**{**SMALL, "epochs": 1}, checkpoint_dir=str(tmp_path)).fit(store)
    with pytest.raises(RunError, match=r"other settings \(dim\)"):
        VQLC(**SMALL, checkpoint_dir=str(tmp_path)).fit(ArrayStore(clustered(d=10)))


def test_the_normalization_travels_in_the_state_dict(fitted, store):
    state = fitted.model_.state_dict()
    assert torch.equal(state["norm_mean"], torch.from_numpy(fitted.mean_))
    assert torch.equal(state["norm_scale"], torch.from_numpy(fitted.scale_))
    fresh = VQModel(12, n_codes=8, hidden=16)
    fresh.load_state_dict(state)
    fresh.eval()
    X = torch.from_numpy(store.read(np.arange(300)))
    with torch.no_grad():
        out = fresh(fresh.normalize(X))
        recon = fresh.denormalize(out.recon, X)  # the default normalises rows one by one: their scale comes back
    assert np.array_equal(out.indices.numpy(), fitted.predict(X))
    assert np.array_equal(recon.numpy(), fitted.reconstruct(X))


def test_save_and_load_give_the_same_predictions_without_pickle(fitted, store, tmp_path):
    fitted.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["method.json", "method.safetensors"]
    loaded = VQLC.load(tmp_path)
    X = store.read(np.arange(200))
    assert np.array_equal(loaded.predict(X), fitted.predict(X))
    assert np.array_equal(loaded.transform(X), fitted.transform(X))
    assert np.array_equal(loaded.reconstruct(X), fitted.reconstruct(X))
    assert np.array_equal(loaded.mean_, fitted.mean_) and np.array_equal(loaded.scale_, fitted.scale_)
    assert loaded.history_ == fitted.history_ and loaded.get_params() == fitted.get_params()
    assert loaded.fit_info_ == fitted.fit_info_


def test_predict_proba_is_a_softmax_over_codes_that_peaks_at_the_prediction(fitted, store):
    X = store.read(np.arange(300))
    p = fitted.predict_proba(X)
    assert p.shape == (300, 8) and p.dtype == np.float32
    assert np.allclose(p.sum(1), 1.0, atol=1e-5)
    assert np.array_equal(p.argmax(1), fitted.predict(X))


def test_from_config_takes_the_build_settings_and_fit_rows_follows_fit_on(store, tmp_path):
    mcfg = MethodsConfig.of(n_concepts=16, vqlc_beta=0.5, vqlc_epochs=None, vqlc_fit_on="fitset")
    est = VQLC.from_config(mcfg, seed=3, workdir=tmp_path)
    assert (est.n_concepts, est.beta, est.epochs, est.seed) == (16, 0.5, None, 3)
    assert est.checkpoint_dir == str(tmp_path / "checkpoint") and est.device == "cpu"
    fitset = np.arange(10)
    assert VQLC.fit_rows(mcfg, store, fitset) is fitset
    train = np.arange(0, 100, 3)
    labelled = SimpleNamespace(rows_where=lambda split: train if split == "train" else None)  # an ActivationStore's one call
    assert VQLC.fit_rows(MethodsConfig.of(vqlc_fit_on="all"), labelled, fitset) is train
    assert set(VQLC.option_names()) == {"vqlc_beta", "vqlc_epochs", "vqlc_fit_on", "vqlc_variant"}
    paper = VQLC.from_config(MethodsConfig.of(vqlc_variant="paper"), seed=0, workdir=tmp_path)
    assert (paper.init, paper.reseed, paper.normalize, paper.ortho_weight) == ("farthest_first", "largest_error",
                                                                               "center_rms", 0.0)



def test_a_bare_estimator_has_the_default_variants_settings():
    """`VQLC()`'s signature shows the default variant's settings, so a notebook's estimator and
    the default build's are one method."""
    import inspect

    from vqlc_core.methods.options import VARIANTS

    params = inspect.signature(VQLC).parameters
    assert {name: params[name].default for name in VARIANTS["default"]} == VARIANTS["default"]

def test_predict_store_covers_every_row_in_order_with_mean_encodings(fitted, store):
    indices, means = fitted.predict_store(store, batch_size=256, return_means=True)
    X = store.read(np.arange(store.n_rows))
    assert np.array_equal(indices, fitted.predict(X))
    z = fitted.transform(X)
    k = int(indices[0])
    assert np.allclose(means[k], z[indices == k].mean(0), atol=1e-5)
    assert np.array_equal(fitted.predict_store(store), indices)
    assert set(fitted.concept_extra()) == {"codes", "encodings"}


def test_fit_on_selected_rows_uses_only_those_rows(store):
    rows = np.arange(0, store.n_rows, 2)
    model = VQLC(**{**SMALL, "epochs": 1}).fit(store, rows=rows)
    assert model.fit_info_["n_fit_rows"] == len(rows)
    assert np.allclose(model.mean_, store.read(rows).mean(0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("normalize", ["none", "standard", "center_rms"])
def test_every_normalization_trains_and_takes_raw_rows(store, normalize):
    model = VQLC(**{**SMALL, "epochs": 1}, normalize=normalize).fit(store)
    X = store.read(np.arange(store.n_rows))
    h = (X - model.mean_) / model.scale_
    if normalize == "standard":
        assert np.allclose(h.std(0), 1.0, atol=1e-3)
    if normalize == "center_rms":
        assert np.allclose(model.scale_, model.scale_[0])
        assert np.sqrt((h**2).mean()) == pytest.approx(1.0, rel=1e-3)
    assert model.predict(X).shape == (store.n_rows,)


def test_an_unknown_normalization_is_refused(store):
    with pytest.raises(ValueError, match="normalize must be one of"):
        VQLC(**SMALL, normalize="zscore").fit(store)


def test_predict_before_fit_says_to_fit_first():
    with pytest.raises(RunError, match="not fitted"):
        VQLC().predict(np.zeros((2, 3), np.float32))


def test_predict_with_the_wrong_width_is_refused(fitted):
    with pytest.raises(ValueError, match=r"expects an \(N, 12\) array"):
        fitted.predict(np.zeros((2, 5), np.float32))


def test_the_orthogonality_penalty_keeps_the_projection_near_an_isometry(store):
    held = VQLC(**SMALL, ortho_weight=4.0, normalize="center_rms", init="farthest_first").fit(store)
    sv = torch.linalg.svdvals(held.model_.encoder.proj.weight.detach())
    assert 0.9 < sv.min() and sv.max() < 1.1
    assert held.history_[-1]["ortho"] < 1e-2  # the penalty's mean over the last epoch
    free = VQLC(**SMALL, ortho_weight=0.0, normalize="center_rms", init="farthest_first").fit(store)
    sv_free = torch.linalg.svdvals(free.model_.encoder.proj.weight.detach())
    assert sv_free.max() > 1.3  # without the penalty P stretches within three epochs


def test_a_negative_orthogonality_weight_is_refused(store):
    with pytest.raises(ValueError, match="ortho_weight must be at least 0"):
        VQLC(**SMALL, ortho_weight=-1.0).fit(store)


def test_codebook_use_is_measured_on_the_rows_given(fitted, store):
    X = store.read(np.arange(store.n_rows))
    assign = fitted.predict(X)
    one = np.flatnonzero(assign == assign[0])  # the rows of one code
    some = fitted.score_store(store, one)
    assert some["perplexity"] == pytest.approx(1.0) and some["dead_codes"] == fitted.n_concepts - 1
    every = fitted.score_store(store)
    assert every["dead_codes"] == int((np.bincount(assign, minlength=fitted.n_concepts) == 0).sum())
    assert every["perplexity"] > 6


def test_the_streamed_measures_describe_a_good_fit(fitted, store):
    m = vqlc_measures(fitted, store)
    assert set(m) == {"r2", "r2_normalized", "perplexity", "dead_codes"}
    assert 0.5 < m["r2_normalized"] <= 1.0
    assert m["dead_codes"] == 0 and m["perplexity"] > 6


def test_a_codes_centre_is_the_decoded_code_in_the_models_space(store):
    plain = VQLC(**SMALL, normalize="center_rms").fit(store)
    with torch.no_grad():
        decoded = plain.model_.decoder(plain.model_.codebook.embed) * plain.model_.norm_scale + plain.model_.norm_mean
    rows = np.arange(store.n_rows)
    assert np.allclose(plain.concept_centres(store, rows), decoded.numpy(), atol=1e-5)
    rowwise = VQLC(**SMALL, normalize="center_row").fit(store)  # decoded at the mean row scale of each code's members
    idx = rowwise.predict(store.read_all())
    with torch.no_grad():
        scale = rowwise.model_.row_scale(torch.from_numpy(store.read_all()))[:, 0].double().numpy()
        h = rowwise.model_.decoder(rowwise.model_.codebook.embed).double().numpy()
    k = int(np.bincount(idx).argmax())
    want = h[k] * scale[idx == k].mean() * rowwise.scale_ + rowwise.mean_
    assert np.allclose(rowwise.concept_centres(store, rows)[k], want, rtol=1e-4, atol=1e-3)


def test_a_step_hook_sees_every_step_and_leaves_the_fit_unchanged(fitted, store):
    from vqlc_core.methods.trainer import on_step

    X, seen = store.read(np.arange(100)), []
    est = VQLC(**SMALL)
    with on_step(est, lambda m, step: seen.append((step, m.model_.training, m.predict(X)))):
        est.fit(store)
    steps = SMALL["epochs"] * -(-store.n_rows // SMALL["batch_size"])
    assert [s for s, *_ in seen] == list(range(steps + 1))  # step 0 is the initialised, untrained fit
    assert not any(training for _, training, _ in seen)
    assert np.array_equal(seen[-1][2], est.predict(X))
    assert torch.equal(est.model_.codebook.embed, fitted.model_.codebook.embed)  # as a fit without the hook
    assert est._step_hooks == []  # the hook is gone after the block


# Epochs left to the fit: it stops once its concepts of a probe of fit rows stop changing.
CONVERGE = {**SMALL, "epochs": None, "n_concepts": 16, "min_steps": 600, "check_every": 5}


def _steps(est) -> int:
    return sum(h["steps"] for h in est.history_)


def test_a_fit_stops_once_its_concepts_stop_changing(store):
    est = VQLC(**CONVERGE).fit(store)
    per_epoch = -(-store.n_rows // CONVERGE["batch_size"])
    cap = est.epochs_for(store.n_rows) * per_epoch
    assert est.history_[-1]["converged"] and per_epoch < _steps(est) < cap / 4
    step, changed = est.changes_[-1]
    assert step == _steps(est) and step % CONVERGE["check_every"] == 0 and changed < est.stop_tol
    assert all(c >= est.stop_tol for _, c in est.changes_[:-1])  # it stops at the first quiet check
    assert est.history_[-1]["changed"] == changed
    # with stop_tol 0 it trains to the cap; with epochs set, every step of them (the probe only watches)
    assert _steps(VQLC(**{**CONVERGE, "stop_tol": 0.0}).fit(store)) == cap
    watched = VQLC(**{**CONVERGE, "epochs": 3}).fit(store)
    plain = VQLC(**{**CONVERGE, "epochs": 3, "stop_tol": 0.0}).fit(store)
    assert _steps(watched) == 3 * per_epoch and watched.changes_ and not plain.changes_
    for a, b in zip(watched.model_.state_dict().values(), plain.model_.state_dict().values()):
        assert torch.equal(a, b)


def test_a_killed_converging_fit_resumes_to_the_same_stop(store, tmp_path):
    whole = VQLC(**CONVERGE).fit(store)
    assert len(whole.history_) > 1  # it converges after the epoch the kill ends
    VQLC(**{**CONVERGE, "epochs": 1}, checkpoint_dir=str(tmp_path)).fit(store)  # killed after epoch 1
    resumed = VQLC(**CONVERGE, checkpoint_dir=str(tmp_path)).fit(store)
    assert resumed.history_ == whole.history_
    for a, b in zip(resumed.model_.state_dict().values(), whole.model_.state_dict().values()):
        assert torch.equal(a, b)
    again = VQLC(**CONVERGE, checkpoint_dir=str(tmp_path)).fit(store)  # a converged checkpoint is kept as it is
    assert again.history_ == whole.history_ and np.array_equal(again.codebook_, whole.codebook_)


def test_a_negative_stop_tolerance_or_check_interval_is_refused(store):
    with pytest.raises(RunError, match="stop_tol"):
        VQLC(**{**CONVERGE, "stop_tol": -0.1}).fit(store)
    with pytest.raises(RunError, match="check_every"):
        VQLC(**{**CONVERGE, "check_every": 0}).fit(store)
