"""The fine-tuning stage inside a build: the run explains the fine-tuned model everywhere, one
forward pass gives both the store and the classifier's features, `--finetune none` keeps the
frozen-probe setting, and changed fine-tuning settings are refused on a finished run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CACHE
from vqlc_core.pipeline.config import preset
from vqlc_core.pipeline.build import build
from vqlc_core.pipeline.run import Run
from vqlc_core.base.runio import RunError

pytestmark = pytest.mark.slow

SMALL = dict(limit=120, n_concepts=10, faithfulness_texts=10, fit_max_words=2000)


def _cache(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    for sub in ("downloads", "datasets", "models"):
        (root / sub).symlink_to(CACHE / sub, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """A small run of the default preset with --finetune none (the frozen-probe setting)."""
    cfg = preset("default", run="frozen", finetune="none", cache_dir=_cache(tmp_path_factory.mktemp("f")), **SMALL)
    return build(cfg, stages=["texts", "finetune", "extract", "classifier"])


def test_the_run_explains_the_finetuned_model_everywhere(apptest_run):
    run = apptest_run
    assert run.manifest.data["stages"]["finetune"]["mode"] == "full"
    texts = run.texts
    test = texts[texts["split"] == "test"]
    # the classifier stage's predictions come from the extraction's own forward pass ...
    feats = run.store.final_features()[test.index.to_numpy()]
    stage_pred = run.classifier.head_proba(feats).argmax(1)
    # ... and equal what the fine-tuned model predicts on the texts, and what the explainer says
    model_pred = run.classifier.predict_proba(test["text"].tolist()).argmax(1)
    explainer = run.explainer()
    explained = [explainer.explain(t).predicted_index for t in test["text"].iloc[:10]]
    assert (stage_pred == model_pred).all()
    assert explained == model_pred[:10].tolist()
    # and the fine-tuned head is the classifier's (not a probe trained afresh on frozen features)
    assert np.allclose(run.classifier.head.weight.numpy(), run.finetuned_head.weight.numpy())


def test_a_reloaded_run_uses_the_finetuned_weights(apptest_run):
    import torch

    fresh = Run(apptest_run.dir)  # loads the base model, then the fine-tuned weights from the run
    base = Run(apptest_run.dir)
    base.manifest.data["stages"].pop("finetune")  # as if the stage had not run: the base model
    w_fresh = fresh.backbone.blocks[0].attention.self.query.weight
    w_base = base.backbone.blocks[0].attention.self.query.weight
    assert not torch.equal(w_fresh, w_base)


def test_finetune_none_keeps_the_frozen_probe_on_the_same_features(frozen):
    from vqlc_core.data.classifier import Classifier, pooled_features

    run = frozen
    assert run.manifest.data["stages"]["finetune"]["mode"] == "none"
    assert not (run.dir / "finetune").exists() and run.finetuned_head is None
    texts = run.texts
    # the features the extraction's forward wrote equal the separate pass the probe used to make
    old = pooled_features(run.backbone, texts["text"].tolist(), progress=False)
    new = run.store.final_features()
    assert np.allclose(new, old, atol=1e-4)
    train = (texts["split"] == "train").to_numpy()
    probe = Classifier.train(run.backbone, old[train], texts["label"].to_numpy()[train], run.class_names, seed=0)
    agree = (probe.head_proba(old).argmax(1) == run.classifier.head_proba(new).argmax(1)).mean()
    assert agree >= 0.99


def test_changing_a_finetuning_setting_of_a_finished_run_is_refused(frozen):
    cfg = frozen.rebuild_config().replace(finetune="full")
    with pytest.raises(RunError, match=r"stage 'finetune' built with --finetune none, not full; pass --rebuild finetune"):
        build(cfg, stages=["texts", "finetune"])


def test_fine_tuning_hyperparameters_of_a_frozen_run_do_not_lock_it(frozen):
    # a run that fine-tuned nothing is not refused for a learning rate or precision it never used
    cfg = frozen.rebuild_config()
    other = "float32" if cfg.finetune.finetune_dtype == "bfloat16" else "bfloat16"
    build(cfg.replace(finetune_dtype=other, finetune_lr=1e-4, finetune_epochs=5), stages=["texts", "finetune"])
    assert Run(frozen.dir).manifest.data["stages"]["finetune"]["mode"] == "none"
    with pytest.raises(RunError, match=r"built with --finetune none, not full"):  # the mode itself still counts
        build(cfg.replace(finetune="full", finetune_dtype=other), stages=["texts", "finetune"])


def test_auto_precision_takes_what_a_finished_stage_was_built_with(apptest_run):
    from vqlc_core.pipeline.build import check_settings
    from vqlc_core.data.settings import FinetuneConfig

    run = apptest_run
    built = run.manifest.data["stages"]["finetune"]["settings"]["finetune_dtype"]
    cfg = run.rebuild_config()
    check_settings(run, cfg.replace(finetune_dtype="auto"), ["finetune"])  # the default: whatever suits the machine
    other = "float32" if built != "float32" else "bfloat16"
    with pytest.raises(RunError, match=rf"built with --finetune-dtype {built}, not {other}; pass --rebuild finetune"):
        check_settings(run, cfg.replace(finetune_dtype=other), ["finetune"])
    # "auto" resolves to a precision before training, and finetune.json records which
    from vqlc_core.base.hardware import fast_bf16

    assert FinetuneConfig().plan("full", 0).dtype == ("bfloat16" if fast_bf16() else "float32")
    assert FinetuneConfig(finetune_dtype="bfloat16").plan("full", 0).dtype == "bfloat16"
    import json

    recorded = json.loads((run.dir / "finetune" / "finetune.json").read_text())["config"]["dtype"]
    # a precision, never "auto"; what "auto" picked depends on the machine and rule the run was built
    # under (a run kept from before "auto" moved to float32 on AVX-512 BF16 holds bfloat16)
    assert recorded in ("float32", "bfloat16") and (built == "auto" or recorded == built)


def test_more_train_texts_than_the_prediction_budget_leave_the_word_rows_alone(frozen):
    """96 train texts against a budget of 40 prediction rows (as 67k SST-2 texts against 10,000):
    the fit set keeps its word rows and samples 40 predictions, stratified by predicted class."""
    cfg = frozen.rebuild_config().replace(fit_max_predictions=40, fit_max_words=300, n_concepts=10)
    run = build(cfg, stages=["fitset"])
    fit = run.manifest.data["stages"]["fitset"]
    rows = np.load(run.dir / "fitset.npy")
    kind = run.store.tokens["kind"].to_numpy()[rows]
    assert (kind == "pred").sum() == 40 == fit["n_prediction_rows"] and fit["available"]["prediction_rows"] == 96
    assert (kind == "word").sum() == 300 == fit["n_word_rows"] < fit["available"]["word_rows"]
    assert fit["prediction_rows_stratified_by"] == "predicted class"
    predicted = run.classifier.head_proba(run.store.final_features()).argmax(1)
    text_of = run.store.tokens["text_id"].to_numpy()
    train = run.texts["split"].to_numpy() == "train"
    share_all = predicted[train].mean()
    share_kept = predicted[text_of[rows[kind == "pred"]]].mean()
    assert abs(share_kept - share_all) <= 1 / 40 + 1e-9
