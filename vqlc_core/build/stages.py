"""The stage registry: every stage of a build declared once (its function, the files it writes,
the settings its output depends on, whether every rank runs it under torchrun), in build order.

Build order, the integrity check's file lists, the CLI's `--rebuild` choices, `runs` and the
dashboard's "is it built" all derive from `STAGES`. The concept-method stage is declared once
and expands to one stage per chosen method, named after it.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from vqlc_core.build.config import SECTIONS, section_fields
from vqlc_core.methods.base import method_class, method_names
from vqlc_core.base.runio import RunError, read_npy, write_json, write_npy, write_parquet
from vqlc_core.base import distributed
from vqlc_core.data.alignment import Aligner, check_alignment
from vqlc_core.data.classifier import Classifier
from vqlc_core.data.datasets import load_dataset, split_dataset
from vqlc_core.data.extract import build_store
from vqlc_core.data.finetune import finetune
from vqlc_core.data.models import load_tokenizer
from vqlc_core.data.store import cap_fit_set, fit_set_rows
from vqlc_core.data.tags import annotate
from vqlc_core.evaluate.evaluation import evaluate
from vqlc_core.evaluate.tag_alignment import cached_alignment_table
from vqlc_core.evaluate.features import write_top
from vqlc_core.explain.baseline import class_means, neutral_baseline
from vqlc_core.explain.explainer import Explainer
from vqlc_core.methods.calibration import calibrate
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.methods.split import build_method
from vqlc_core.views.browse import precompute_clouds, precompute_example
from vqlc_core.views.maps import BackgroundMaps, concept_map, map_vectors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable  # (run: Run, name: str) -> dict of facts for the manifest
    files: tuple[str, ...]  # globs under the run directory; "{name}" is the stage's own name
    reads: tuple[str, ...] = ()  # settings (flat config names) its output depends on, besides...
    sections: tuple[str, ...] = ()  # ...every setting of these config sections
    sharded: bool = False  # every rank runs it under torchrun (else rank 0 alone)
    per_method: bool = False  # one stage per chosen concept method
    needs: tuple[str, ...] = ()  # the stages whose output it reads ("method": every method stage)


# --- the stages ------------------------------------------------------------------------------
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


def stage_fitset(run, name: str) -> dict:
    cfg, fs, store = run.cfg, run.cfg.fitset, run.store
    tokens = store.tokens
    train = tokens[tokens["split"] == "train"]
    rows = train.index.to_numpy()[fit_set_rows(train.reset_index(drop=True), fs.max_per_word, fs.min_word_count,
                                                seed=cfg.seed)]
    rows = cap_fit_set(rows, tokens["kind"].to_numpy()[rows] == "pred", fs.fit_max_rows, cfg.seed)
    if len(rows) < cfg.methods.n_concepts:
        raise RunError(f"The fit set has {len(rows)} rows but {cfg.methods.n_concepts} concepts were requested; "
                       "lower --n-concepts or use more texts.")
    write_npy(run.dir / "fitset.npy", rows.astype(np.int64))
    return {"n_rows": int(len(rows)), "n_prediction_rows": int((tokens["kind"].to_numpy()[rows] == "pred").sum())}


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
    return evaluate(run)


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


# --- the registry, in build order --------------------------------------------------------------
STAGES: tuple[Stage, ...] = (
    Stage("texts", stage_texts, ("texts.parquet",), ("seed",), sections=("data",)),
    Stage("finetune", stage_finetune, ("finetune/*",), ("model", "pooling", "max_length", "seed"),
          sections=("finetune",), needs=("texts",)),
    Stage("extract", stage_extract, ("store/store.json", "store/tokens.parquet", "store/vectors_*.npy",
                                     "store/final.npy"),
          ("model", "layer", "pooling", "aggregation", "max_length", "dtype", "weights"), sharded=True,
          needs=("texts", "finetune")),
    Stage("classifier", stage_classifier, ("classifier/*",), ("seed",), needs=("finetune", "extract")),
    Stage("annotate", stage_annotate, ("store/tags.parquet",), ("seed",), needs=("texts", "extract", "classifier")),
    Stage("fitset", stage_fitset, ("fitset.npy",), ("seed",), sections=("fitset",), needs=("extract",)),
    Stage("method", stage_method, ("methods/{name}/*.npy", "methods/{name}/*.json", "methods/{name}/summary.parquet",
                                   "methods/{name}/model/*", "methods/{name}/model/*/*",
                                   "methods/{name}/seeds/*/*.npy", "methods/{name}/seeds/*/*.json",
                                   "methods/{name}/seeds/*/summary.parquet", "methods/{name}/seeds/*/model/*",
                                   "methods/{name}/seeds/*/model/*/*"),
          ("n_concepts", "prediction_concepts", "concept_vectors", "seed", "seeds"), sharded=True, per_method=True,
          needs=("extract", "fitset")),
    Stage("evaluate", stage_evaluate, ("eval/*",), ("methods", "seed", "seeds"), sections=("eval",),
          needs=("classifier", "method")),
    Stage("maps", stage_maps, ("methods/*/map.parquet", "methods/*/top_activations.parquet"), ("methods", "seed"),
          needs=("classifier", "method")),
)


def stage_order(methods=None) -> list[tuple[str, Stage]]:
    """(name, stage) in build order, the method stage expanded to one per method in `methods`
    (default: every registered method)."""
    methods = method_names() if methods is None else methods
    out = []
    for st in STAGES:
        out += [(m, st) for m in methods] if st.per_method else [(st.name, st)]
    return out


def stage_names(methods=None) -> list[str]:
    """Stage names in build order (every registered method by default: the `--rebuild` choices)."""
    return [name for name, _ in stage_order(methods)]


def stage_of(name: str) -> Stage:
    """The registry entry behind stage `name` (a method's name gives the method stage)."""
    for n, st in stage_order():
        if n == name:
            return st
    raise RunError(f"Unknown stage '{name}'; choose one of {', '.join(stage_names())}.")


def stage_reads(name: str) -> tuple[str, ...]:
    """The settings stage `name`'s output depends on: its own, its sections' and, for a method
    stage, the method's options."""
    st = stage_of(name)
    own = tuple(n for s in st.sections for n, _ in section_fields(SECTIONS[s]))
    return st.reads + own + (method_class(name).option_names() if st.per_method else ())


def stages_needed(name: str, methods=None) -> list[str]:
    """Stage `name` and every stage it needs, directly or through others, in build order."""
    methods = method_names() if methods is None else methods
    want, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in want:
            want.add(n)
            todo += [m for need in stage_of(n).needs for m in (methods if need == "method" else (need,))]
    return [n for n in stage_names(methods) if n in want]


def stage_globs(name: str) -> list[str]:
    """The file globs, under the run directory, of what stage `name` writes."""
    return [g.format(name=name) for g in stage_of(name).files]
