"""The stage registry: every stage of a build declared once (its function, the files it writes,
the settings its output depends on, whether every rank runs it under torchrun), in build order.

Build order, the integrity check's file lists, the CLI's `--rebuild` choices, `runs` and the
dashboard's "is it built" all derive from `STAGES`. The concept-method stage is declared once
and expands to one stage per chosen method, named after it.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from .methods import METHODS, method_class
from .runio import RunError, read_npy, write_json, write_npy, write_parquet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable  # (run: Run, name: str) -> dict of facts for the manifest
    files: tuple[str, ...]  # globs under the run directory; "{name}" is the stage's own name
    reads: tuple[str, ...] = ()  # the settings (flat config names) its output depends on
    sharded: bool = False  # every rank runs it under torchrun (else rank 0 alone)
    per_method: bool = False  # one stage per chosen concept method


# --- the stages ------------------------------------------------------------------------------
def stage_texts(run, name: str) -> dict:
    from .datasets import load_dataset, split_dataset

    cfg, data = run.cfg, run.cfg.data
    ds = load_dataset(data.dataset, cache_dir=cfg.cache_dir, text_column=data.text_column,
                      label_column=data.label_column, limit=data.limit, seed=cfg.seed)
    split = split_dataset(ds.labels, ds.groups, seed=cfg.seed)
    df = pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels.astype(np.int64),
                       "split": split, "group": ds.groups if ds.groups is not None else np.arange(len(ds.texts))})
    write_parquet(run.dir / "texts.parquet", df)
    run.manifest.data["class_names"] = list(ds.class_names)
    return {"n_texts": len(df), "splits": df["split"].value_counts().to_dict()}


def stage_finetune(run, name: str) -> dict:
    from .finetune import FinetuneConfig, finetune

    bb = run.backbone
    ft = run.cfg.finetune
    mode = ft.mode_for(bb.kind, bb.is_classifier)
    if mode == "none":
        return {"mode": "none"}
    ftcfg = FinetuneConfig(mode=mode, epochs=ft.finetune_epochs, batch_size=ft.finetune_batch_size, lr=ft.finetune_lr,
                           lora_rank=ft.finetune_lora_rank, train_blocks=ft.finetune_train_blocks,
                           dtype=ft.finetune_dtype, patience=ft.finetune_patience, seed=run.cfg.seed,
                           probe_init=(ft.finetune_probe_init or ("on" if mode == "lora" else "off")) == "on")
    head, info = finetune(bb, run.texts, run.class_names, ftcfg, run.dir / "finetune")
    run._finetuned_head = head
    return {"mode": mode, "chosen_epoch": info["chosen_epoch"], "dev_accuracy": info["best_dev_accuracy"],
            "seconds": info["seconds"]}


def stage_extract(run, name: str) -> dict:
    from .extract import build_store

    from . import distributed
    from .alignment import check_alignment

    ecfg, bb = run.cfg.extract, run.backbone
    layer = bb.check_layer(ecfg.layer if ecfg.layer is not None else max(1, bb.n_layers - 1))
    # Words are what concepts are made of: refuse a tokenizer whose words do not line up with the text's.
    ratio = check_alignment(bb, run.texts["text"].tolist())
    run.manifest.data["alignment"] = {"ratio": round(ratio, 4), "family": bb.aligner.family,
                                      "scheme": bb.aligner.scheme}
    run.manifest.data["layer"] = layer
    run.manifest.data["pooling"] = ecfg.pooling or bb.pooling
    device = distributed.device() if distributed.world() > 1 else "cpu"
    bb.model.to(device)  # each rank's own GPU under torchrun with CUDA
    try:
        store = build_store(bb, run.texts, replace(ecfg, layer=layer), run.dir / "store")
    finally:
        bb.model.to("cpu")
    run._store = store
    return {"n_rows": store.n_rows, "dim": store.dim, "layer": layer, "alignment_ratio": round(ratio, 4)}


def stage_classifier(run, name: str) -> dict:
    """The classifier being explained: a sequence-classification model's own head, the fine-tuned
    head, or (frozen model) a logistic-regression head on the extraction's pooled last-layer
    features; its accuracy per split."""
    from .classifier import Classifier

    texts, bb = run.texts, run.backbone
    if bb.is_classifier:
        clf = Classifier(bb, run.class_names)
        proba = np.concatenate([clf.predict_proba(texts["text"].iloc[i : i + 32].tolist())
                                for i in range(0, len(texts), 32)])
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
        proba = clf.head_proba(feats)
    pred = proba.argmax(1)
    acc = {s: float((pred[m] == texts["label"].to_numpy()[m]).mean())
           for s in ("train", "dev", "test") if (m := (texts["split"] == s).to_numpy()).any()}
    clf.save(run.dir / "classifier")
    base, facts = _neutral_baseline(run, clf)
    write_npy(run.dir / "classifier" / "ig_baseline.npy", base)
    write_json(run.dir / "classifier" / "metrics.json", {"accuracy": acc, "ig_baseline": facts})
    run._classifier = clf
    return {"accuracy": acc, "ig_baseline_probabilities": [round(p, 3) for p in facts["calibration_probabilities"]]}


def _neutral_baseline(run, clf, n_texts: int = 32):
    """Integrated Gradients' neutral baseline state for `clf` (see `baseline.py`), fitted on a
    seeded sample of train texts."""
    from .baseline import class_means, neutral_baseline
    from .explain import Explainer

    e = run.cfg.extract
    explainer = Explainer(clf, run.layer, {}, autocast_dtype=e.autocast_dtype, aggregation=e.aggregation)
    train = run.texts[run.texts["split"] == "train"]["text"].to_numpy()
    pick = np.random.default_rng(run.cfg.seed).choice(len(train), size=min(n_texts, len(train)), replace=False)
    return neutral_baseline(explainer, [str(t) for t in train[np.sort(pick)]], class_means(run.store))


def stage_fitset(run, name: str) -> dict:
    from .store import cap_fit_set, fit_set_rows

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


def stage_method(run, name: str) -> dict:
    """Fit method `name` once per seed of the build on the shared rows; the first seed's model
    and concepts go to methods/<name>/, the others' to methods/<name>/seeds/<seed>/."""
    from . import distributed
    from .concepts import ConceptSet

    cfg, store = run.cfg, run.store
    cls, info = method_class(name), {}
    rows = cls.fit_rows(cfg.methods, store, read_npy(run.dir / "fitset.npy"))
    for seed in cfg.method_seeds:
        workdir = run.method_dir(name, seed)
        method = cls.from_config(cfg.methods, seed, workdir).fit(store, rows=rows)
        if not distributed.is_main():
            continue  # every rank holds the fitted model; rank 0 assigns and saves
        assignments = method.predict_store(store)
        fit = dict(method.fit_info_)
        cs = ConceptSet.from_assignments(name, store, assignments, method.n_concepts, run.class_names,
                                         extra=method.concept_extra(), info=fit, seed=seed, fit_rows=rows,
                                         centres=method.concept_centres(store, rows),
                                         vectors=cfg.methods.concept_vectors)
        method.save(workdir / "model")
        cs.save(workdir)
        shutil.rmtree(workdir / "checkpoint", ignore_errors=True)
        info = info or {"fit_time_s": round(fit["fit_time_s"], 2), "peak_rss_mb": round(fit["peak_rss_mb"], 1),
                        "n_fit_rows": int(len(rows)), "used_concepts": int((cs.summary["size"] > 0).sum())}
    return {**info, "seeds": list(cfg.method_seeds)}


def stage_evaluate(run, name: str) -> dict:
    from .evaluate import evaluate

    return evaluate(run)


def stage_maps(run, name: str) -> dict:
    from .browse import precompute_clouds, precompute_example
    from .features import write_top
    from .maps import concept_map

    for m in run.methods_built():
        write_parquet(run.dir / "methods" / m / "map.parquet", concept_map(run.concept_set(m), seed=run.cfg.seed))
        precompute_clouds(run, m, n=24)  # the Concepts page's first grid page opens without drawing
        write_top(run, m)  # an SAE feature's top-activating contexts (methods with activations only)
    if run.manifest.is_complete("classifier"):
        precompute_example(run)  # Explain and Compare open on it without waiting for the model
    return {"methods": run.methods_built()}


# --- the registry, in build order --------------------------------------------------------------
STAGES: tuple[Stage, ...] = (
    Stage("texts", stage_texts, ("texts.parquet",), ("dataset", "text_column", "label_column", "limit", "seed")),
    Stage("finetune", stage_finetune, ("finetune/*",),
          ("model", "pooling", "max_length", "finetune", "finetune_epochs", "finetune_batch_size", "finetune_lr",
           "finetune_lora_rank", "finetune_train_blocks", "finetune_dtype", "finetune_patience", "finetune_probe_init",
           "seed")),
    Stage("extract", stage_extract, ("store/store.json", "store/tokens.parquet", "store/vectors_*.npy",
                                     "store/final.npy"),
          ("model", "layer", "pooling", "aggregation", "max_length", "dtype"), sharded=True),
    Stage("classifier", stage_classifier, ("classifier/*",), ("seed",)),
    Stage("fitset", stage_fitset, ("fitset.npy",), ("max_per_word", "min_word_count", "fit_max_rows", "seed")),
    Stage("method", stage_method, ("methods/{name}/*.npy", "methods/{name}/*.json", "methods/{name}/summary.parquet",
                                   "methods/{name}/model/*", "methods/{name}/seeds/*/*.npy",
                                   "methods/{name}/seeds/*/*.json", "methods/{name}/seeds/*/summary.parquet",
                                   "methods/{name}/seeds/*/model/*"),
          ("n_concepts", "concept_vectors", "seed", "seeds"), sharded=True, per_method=True),
    Stage("evaluate", stage_evaluate, ("eval/*",), ("methods", "faithfulness_texts", "ig_steps", "seed", "seeds")),
    Stage("maps", stage_maps, ("methods/*/map.parquet", "methods/*/top_activations.parquet"), ("methods", "seed")),
)


def stage_order(methods=METHODS) -> list[tuple[str, Stage]]:
    """(name, stage) in build order, the method stage expanded to one per method in `methods`."""
    out = []
    for st in STAGES:
        out += [(m, st) for m in methods] if st.per_method else [(st.name, st)]
    return out


def stage_names(methods=METHODS) -> list[str]:
    """Stage names in build order (every registered method by default: the `--rebuild` choices)."""
    return [name for name, _ in stage_order(methods)]


def stage_of(name: str) -> Stage:
    """The registry entry behind stage `name` (a method's name gives the method stage)."""
    for n, st in stage_order():
        if n == name:
            return st
    raise RunError(f"Unknown stage '{name}'; choose one of {', '.join(stage_names())}.")


def stage_reads(name: str) -> tuple[str, ...]:
    """The settings stage `name`'s output depends on (a method adds its own `config_keys`)."""
    st = stage_of(name)
    return st.reads + (method_class(name).config_keys if st.per_method else ())


def stage_globs(name: str) -> list[str]:
    """The file globs, under the run directory, of what stage `name` writes."""
    return [g.format(name=name) for g in stage_of(name).files]
