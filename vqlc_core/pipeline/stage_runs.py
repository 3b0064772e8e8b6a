"""What each stage of a build does: one function per stage of the registry (`stages.STAGES`
names each by its name here), `(run, name) -> dict` of facts for the manifest. Imported when a
stage runs, so reading the registry (the command line, `vqlc runs`) loads none of this.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from vqlc_core.base import distributed
from vqlc_core.base.runio import RunError, read_npy, write_json, write_npy, write_parquet
from vqlc_core.data.alignment import Aligner, check_alignment
from vqlc_core.data.classifier import Classifier
from vqlc_core.data.datasets import load_dataset, split_dataset
from vqlc_core.data.extract import build_store
from vqlc_core.data.finetune import finetune
from vqlc_core.data.models import load_tokenizer
from vqlc_core.data.store import budget_fit_set, fit_set_rows
from vqlc_core.data.tags import annotate
from vqlc_core.evaluate.evaluation import evaluate
from vqlc_core.evaluate.features import write_top
from vqlc_core.evaluate.tag_alignment import cached_alignment_table
from vqlc_core.explain.baseline import class_means, neutral_baseline
from vqlc_core.explain.explainer import Explainer
from vqlc_core.methods.calibration import calibrate
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.methods.registry import method_class
from vqlc_core.methods.sizing import size_notes
from vqlc_core.methods.split import build_method, prediction_concept_count
from vqlc_core.views.browse import precompute_clouds, precompute_example
from vqlc_core.views.maps import BackgroundMaps, concept_map, map_vectors

log = logging.getLogger(__name__)


def stage_texts(run, name: str) -> dict:
    cfg, data = run.cfg, run.cfg.data
    ds = load_dataset(data.dataset, cache_dir=cfg.cache_dir, text_column=data.text_column,
                      label_column=data.label_column, limit=data.limit, seed=cfg.seed)
    split = split_dataset(ds.labels, ds.groups, seed=cfg.seed)
    df = pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels.astype(np.int64),
                       "split": split, "group": ds.groups if ds.groups is not None else np.arange(len(ds.texts))})
    write_parquet(run.dir / "texts.parquet", df)
    run.manifest.data["class_names"] = list(ds.class_names)
    run.manifest.data.pop("alignment", None)  # measured on other texts
    check_words(run)  # the first moment it can: a model that fails costs seconds, and a new run is not kept
    return {"n_texts": len(df), "splits": df["split"].value_counts().to_dict()}


def check_words(run) -> float:
    """Words are what concepts are made of: refuse a model whose tokenizer's words do not line up
    with the text's, reading the tokenizer alone, before any weights are converted, fine-tuned or
    run. The ratio, family and scheme go into the manifest, with the model and max_length they
    were measured for, so a later stage measures again only when either changed."""
    e = run.cfg.extract
    facts = run.manifest.data.get("alignment") or {}
    if facts.get("model") == e.model and facts.get("max_length") == e.max_length:
        return facts["ratio"]
    tok, model, add_bos = load_tokenizer(e.model, run.cfg.cache_dir)
    ratio = check_alignment(tok, run.texts["text"].tolist(), model, e.max_length, add_bos)
    aligner = Aligner(tok)
    run.manifest.data["alignment"] = {"ratio": round(ratio, 4), "family": aligner.family, "scheme": aligner.scheme,
                                      "model": e.model, "max_length": e.max_length}
    return ratio


def stage_finetune(run, name: str) -> dict:
    check_words(run)  # before the model is loaded (a GGUF file is converted then), if the model changed
    bb = run.backbone
    ft = run.cfg.finetune
    mode = ft.mode_for(bb.kind, bb.is_classifier)
    if mode == "none":
        return {"mode": "none"}
    head, info = finetune(bb, run.texts, run.class_names, ft, run.dir / "finetune", seed=run.cfg.seed)
    run.finetuned_head = head
    return {"mode": mode, "chosen_epoch": info["chosen_epoch"], "dev_accuracy": info["best_dev_accuracy"],
            "seconds": info["seconds"], "estimated_seconds": info["estimated_seconds"], "steps": info["steps"]}


def stage_extract(run, name: str) -> dict:
    ratio = check_words(run)  # measured again only when the model or max_length changed since
    ecfg, bb = run.cfg.extract, run.backbone
    layer = bb.check_layer(ecfg.layer if ecfg.layer is not None else max(1, bb.n_layers - 1))
    run.manifest.data["layer"] = layer
    run.manifest.data["pooling"] = ecfg.pooling or bb.pooling
    t0 = time.perf_counter()
    store = build_store(bb, run.texts, replace(ecfg, layer=layer), run.dir / "store")  # on run.device
    run.store = store
    return {"n_rows": store.n_rows, "dim": store.dim, "layer": layer, "alignment_ratio": round(ratio, 4),
            "weights": run.weights, "extract_s": round(time.perf_counter() - t0, 2)}


def stage_classifier(run, name: str) -> dict:
    """The classifier being explained: a sequence-classification model's own head, the fine-tuned
    head, or (frozen model) a logistic-regression head on the extraction's pooled last-layer
    features; its accuracy per split."""
    texts, bb = run.texts, run.backbone
    if bb.is_classifier:
        clf = Classifier(bb, run.class_names)
    else:
        feats = run.store.final_features()  # (n_texts, d), from the extraction's forward
        if len(feats) != len(texts):
            raise RunError(f"The store has final features of {len(feats)} texts, expected {len(texts)}; "
                           "pass --rebuild extract.")
        if run.finetuned_head is not None:
            clf = Classifier(bb, run.class_names, run.finetuned_head)
        else:
            train = (texts["split"] == "train").to_numpy()
            clf = Classifier.train(bb, feats[train], texts["label"].to_numpy()[train], run.class_names,
                                   seed=run.cfg.seed)
    pred = text_proba(run, clf).argmax(1)
    acc = {s: float((pred[m] == texts["label"].to_numpy()[m]).mean())
           for s in ("train", "dev", "test") if (m := (texts["split"] == s).to_numpy()).any()}
    clf.save(run.dir / "classifier")
    base, facts = _neutral_baseline(run, clf)
    write_npy(run.dir / "classifier" / "ig_baseline.npy", base)
    write_json(run.dir / "classifier" / "metrics.json", {"accuracy": acc, "ig_baseline": facts})
    run.classifier = clf
    return {"accuracy": acc, "ig_baseline_probabilities": [round(p, 3) for p in facts["calibration_probabilities"]]}


def text_proba(run, clf) -> np.ndarray:
    """(n_texts, n_classes) the classifier's probabilities for every text of the run, in text
    order: from the store's final features, or (a sequence-classification model) a forward pass."""
    if clf.backbone.is_classifier:
        texts = run.texts["text"]
        return np.concatenate([clf.predict_proba(texts.iloc[i : i + 32].tolist()) for i in range(0, len(texts), 32)])
    return clf.head_proba(run.store.final_features())


def _neutral_baseline(run, clf, n_texts: int = 32):
    """Integrated Gradients' neutral baseline state for `clf` (see `baseline.py`), fitted on a
    seeded sample of train texts."""
    e = run.cfg.extract
    explainer = Explainer(clf, run.layer, {}, autocast_dtype=e.autocast_dtype, aggregation=e.aggregation)
    train = run.texts[run.texts["split"] == "train"]["text"].to_numpy()
    pick = np.random.default_rng(run.cfg.seed).choice(len(train), size=min(n_texts, len(train)), replace=False)
    return neutral_baseline(explainer, [str(t) for t in train[np.sort(pick)]], class_means(run.store))


def stage_annotate(run, name: str) -> dict:
    """Linguistic tags of every store row (`tags.py`): store/tags.parquet, row for row."""
    predicted = text_proba(run, run.classifier).argmax(1)
    ann = annotate(run.texts, run.store.tokens, run.class_names, predicted)
    write_parquet(run.dir / "store" / "tags.parquet", ann.table)
    known = {s: round(float(ann.table[s].notna().mean()), 3) for s in ann.table.columns}
    return {"tag_sets": [s for s in ann.table.columns if s not in ann.missing], "missing": ann.missing,
            "tagged_share": known}


def _fit_strata(run, tokens, rows: np.ndarray, fs) -> tuple[np.ndarray | None, str | None]:
    """One class per row of `rows` to stratify a sample of the prediction rows by: each text's
    predicted class where the classifier is built, else its label; (None, None) when the prediction
    rows fit their budget and no sample is drawn."""
    is_pred = tokens["kind"].to_numpy()[rows] == "pred"
    if int(is_pred.sum()) <= fs.fit_max_predictions:
        return None, None
    text_ids = tokens["text_id"].to_numpy()[rows]
    if run.manifest.is_complete("classifier"):
        predicted = pd.Series(text_proba(run, run.classifier).argmax(1), index=run.texts["text_id"].to_numpy())
        return predicted.reindex(text_ids).fillna(-1).to_numpy(), "predicted class"
    return tokens["label"].to_numpy()[rows], "label"


def stage_fitset(run, name: str) -> dict:
    """The fit set: LACOAT's rule over the train word rows (at most `max_per_word` a type, types
    seen `min_word_count` times), then word rows and prediction rows each within its own budget."""
    cfg, fs, store = run.cfg, run.cfg.fitset, run.store
    tokens = store.tokens
    train = tokens[tokens["split"] == "train"]
    rows = train.index.to_numpy()[fit_set_rows(train.reset_index(drop=True), fs.max_per_word, fs.min_word_count,
                                                seed=cfg.seed)]
    strata, stratified_by = _fit_strata(run, tokens, rows, fs)
    rows, kept = budget_fit_set(rows, tokens["kind"].to_numpy()[rows] == "pred", fs.fit_max_words,
                                fs.fit_max_predictions, cfg.seed, strata)
    if len(rows) < cfg.methods.n_concepts:
        raise RunError(f"The fit set has {len(rows)} rows but {cfg.methods.n_concepts} concepts were requested; "
                       "lower --n-concepts or use more texts.")
    write_npy(run.dir / "fitset.npy", rows.astype(np.int64))
    n_pred = kept["prediction_rows_kept"]
    m = cfg.methods
    notes = size_notes(len(rows) - n_pred, n_pred, m.n_concepts, prediction_concept_count(m.prediction_concepts, n_pred),
                       available=(kept["word_rows"], kept["prediction_rows"]))
    for note in notes:  # a small data set: say so, once, in the log (the Build page reads it from the manifest)
        log.warning("[fitset] %s", note)
    return {"n_rows": int(len(rows)), "n_prediction_rows": n_pred, "n_word_rows": int(len(rows) - n_pred),
            "available": kept, "prediction_rows_stratified_by": stratified_by, "size_notes": notes}


def concept_set_of(run, name: str, method, rows: np.ndarray, seed: int) -> ConceptSet:
    """The concept set of fitted `method` over the run's store, as the build makes it: every row
    assigned, concept vectors by the build's definition, and the calibration of its prediction
    concepts' probabilities on dev (`calibration.calibrate`)."""
    store = run.store
    assignments = method.predict_store(store)
    cs = ConceptSet.from_assignments(name, store, assignments, method.n_concepts, run.class_names,
                                     extra=method.concept_extra(), info=dict(method.fit_info_), seed=seed,
                                     fit_rows=rows, centres=method.concept_centres(store, rows),
                                     vectors=run.cfg.methods.concept_vectors)
    cs.info["calibration"] = calibrate(store, method, assignments, cs.n_concepts)
    return cs


def stage_method(run, name: str) -> dict:
    """Fit method `name` once per seed of the build on the shared rows; the first seed's model
    and concepts go to methods/<name>/, the others' to methods/<name>/seeds/<seed>/."""
    cfg, store = run.cfg, run.store
    cls, info = method_class(name), {}
    rows = cls.fit_rows(cfg.methods, store, read_npy(run.dir / "fitset.npy"))
    for seed in cfg.method_seeds:
        workdir = run.method_dir(name, seed)
        method = build_method(name, cfg.methods, seed, workdir, store, rows, device=run.device).fit(store, rows=rows)
        if not distributed.is_main():
            continue  # every rank holds the fitted model; rank 0 assigns and saves
        fit = dict(method.fit_info_)
        cs = concept_set_of(run, name, method, rows, seed)
        shutil.rmtree(workdir / "model", ignore_errors=True)  # a split model and a single one save differently
        method.save(workdir / "model")
        cs.save(workdir)
        for sub in ("", "words", "predictions"):
            shutil.rmtree(workdir / sub / "checkpoint", ignore_errors=True)
        info = info or {"fit_time_s": round(fit["fit_time_s"], 2), "peak_rss_mb": round(fit["peak_rss_mb"], 1),
                        "n_fit_rows": int(len(rows)), "used_concepts": int((cs.summary["size"] > 0).sum())}
    return {**info, "seeds": list(cfg.method_seeds)}


def stage_evaluate(run, name: str) -> dict:
    # each text's predicted class: the prediction concept's class-direction control is drawn from it
    return evaluate(run, predicted=text_proba(run, run.classifier).argmax(1))


def stage_maps(run, name: str) -> dict:
    sets = {m: run.concept_set(m) for m in run.methods_built()}
    # the maps' UMAPs run in a child process (~20 s of compiling on one core) while this one draws
    with BackgroundMaps({m: map_vectors(cs) for m, cs in sets.items()}, seed=run.cfg.seed) as maps:
        for m in sets:
            precompute_clouds(run, m)  # every cloud (~50 ms each): no page or HTML export draws one
            write_top(run, m)  # an SAE feature's top-activating contexts (methods with activations only)
        if run.manifest.is_complete("classifier"):
            precompute_example(run)  # Explain and Compare open on it without waiting for the model
        if run.tags is not None:
            cached_alignment_table(run)  # Compare's aligned-concept table, from every seed's concepts once
        for m, cs in sets.items():
            write_parquet(run.dir / "methods" / m / "map.parquet", concept_map(cs, seed=run.cfg.seed, xy=maps.embed(m)))
    return {"methods": run.methods_built()}
