"""The build pipeline: texts -> extract -> classifier -> concept methods -> evaluate -> maps.

Each stage writes its files atomically and is recorded in the run's manifest when complete;
a rerun skips finished stages, so an interrupted build resumes. The dashboard's Build button
and the command line run this same code. Under torchrun every rank runs `extract` and `vqlc`
(sharded); rank 0 alone runs the other stages and writes the manifest while the others wait.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import distributed
from .config import BuildConfig
from .runio import CorruptStage, Manifest, RunError, read_json, read_npy, read_parquet, write_json, write_npy, write_parquet

STAGES = ("texts", "extract", "classifier", "fitset", "vqlc", "kmeans", "lacoat", "evaluate", "maps")
SHARDED = ("extract", "vqlc")  # the stages every rank runs under torchrun


class Run:
    """A run directory: its config, manifest and lazily loaded parts."""

    def __init__(self, run_dir: str | Path, cfg: BuildConfig | None = None):
        self.dir = Path(run_dir)
        self.manifest = Manifest(self.dir)
        if cfg is None:
            if not self.manifest.path.exists():
                raise RunError(f"No run in {self.dir}; build one with `python -m vqlc_core build`.")
            self.manifest.check_version()
            cfg = BuildConfig.from_json(self.manifest.data["config"])
        self.cfg = cfg
        self._backbone = self._store = self._classifier = None

    # --- parts ----------------------------------------------------------------------------
    @property
    def texts(self) -> pd.DataFrame:
        return read_parquet(self.dir / "texts.parquet")

    @property
    def class_names(self) -> list[str]:
        return self.manifest.data["class_names"]

    @property
    def layer(self) -> int:
        return int(self.manifest.data["layer"])

    @property
    def backbone(self):
        if self._backbone is None:
            import torch

            from .backbone import Backbone
            from .sources import resolve_model

            src = resolve_model(self.cfg.model, cache_dir=self.cfg.cache_dir)
            self._backbone = Backbone.from_source(src, dtype=torch.float32, max_length=self.cfg.max_length,
                                                  pooling=self.cfg.pooling)
        return self._backbone

    @property
    def store(self):
        if self._store is None:
            from .store import ActivationStore

            self._store = ActivationStore(self.dir / "store")
        return self._store

    @property
    def classifier(self):
        if self._classifier is None:
            from .classifier import Classifier

            self._classifier = Classifier.load(self.dir / "classifier", self.backbone)
        return self._classifier

    @property
    def autocast_dtype(self):
        """torch.bfloat16 when the run was configured for bf16 autocast, else None."""
        import torch

        return torch.bfloat16 if self.cfg.dtype == "bfloat16" else None

    def explainer(self, methods: dict | None = None):
        """An Explainer over the run's classifier and (by default) every built method."""
        from .explain import Explainer

        if methods is None:
            methods = {m: (self.method(m), self.concept_set(m)) for m in self.methods_built()}
        return Explainer(self.classifier, self.layer, methods, ig_steps=self.cfg.ig_steps,
                         autocast_dtype=self.autocast_dtype)

    def methods_built(self) -> list[str]:
        return [m for m in self.cfg.methods if self.manifest.is_complete(m)]

    # --- integrity ------------------------------------------------------------------------
    def stage_order(self) -> list[str]:
        return ["texts", "extract", "classifier", "fitset", *self.cfg.methods, "evaluate", "maps"]

    def seal(self, stage: str) -> dict:
        """Record the sizes and sha256 digests of `stage`'s files (kept in its manifest entry)."""
        from .integrity import record

        return record(self.dir, stage, tuple(self.cfg.methods))

    def verify(self, deep: bool = True) -> dict[str, str]:
        """{stage: what is wrong} for every finished stage whose files are missing, truncated or
        changed since they were written (digests only when `deep`); empty when all is well.
        Stages finished before files were recorded are taken as they are."""
        from .integrity import problem

        out = {}
        for stage in self.stage_order():
            entry = self.manifest.data["stages"].get(stage, {})
            if entry.get("state") == "complete" and entry.get("files"):
                why = problem(self.dir, entry["files"], deep=deep)
                if why:
                    out[stage] = why
        return out

    def check(self, deep: bool = True) -> None:
        """Raise CorruptStage, naming the first stage to rebuild, when `verify` finds a problem."""
        problems = self.verify(deep=deep)
        if problems:
            stage, why = next(iter(problems.items()))
            raise CorruptStage(f"Stage '{stage}' of run '{self.dir.name}' is corrupt ({why}); "
                               f"rerun with --rebuild {stage}.", self.dir, stage)

    def invalidate_from(self, stage: str) -> list[str]:
        """Mark `stage` and every stage after it as not built; return them."""
        order = self.stage_order()
        if stage not in order:
            raise RunError(f"Unknown stage '{stage}'; choose one of {', '.join(order)}.")
        later = order[order.index(stage):]
        for s in later:
            self.manifest.data["stages"].pop(s, None)
        self.manifest.save()
        if "extract" in later:  # a finished store is reused as it is; start it afresh
            shutil.rmtree(self.dir / "store", ignore_errors=True)
        return later

    def concept_set(self, method: str):
        from .concepts import ConceptSet

        return ConceptSet.load(self.dir / "methods" / method, n_rows=self.store.n_rows, dim=self.store.dim)

    def method(self, name: str):
        return _method_class(name).load(self.dir / "methods" / name / "model")

    def concept_map(self, method: str) -> pd.DataFrame:
        return read_parquet(self.dir / "methods" / method / "map.parquet")

    def faithfulness(self) -> pd.DataFrame:
        return read_parquet(self.dir / "eval" / "faithfulness.parquet")

    def measures(self) -> dict:
        return read_json(self.dir / "eval" / "measures.json")


def _method_class(name: str):
    if name == "vqlc":
        from .vqlc import VQLC

        return VQLC
    if name == "kmeans":
        from .kmeans import KMeansConcepts

        return KMeansConcepts
    if name == "lacoat":
        from .lacoat import LACOAT

        return LACOAT
    raise RunError(f"Unknown method '{name}'.")


def make_method(name: str, cfg: BuildConfig, run_dir: Path):
    """A fresh, unfitted estimator for `name` with the build's parameters."""
    if name == "vqlc":
        from .vqlc import VQLC

        kw = {} if cfg.vqlc_epochs is None else {"epochs": cfg.vqlc_epochs}
        return VQLC(n_concepts=cfg.n_concepts, beta=cfg.vqlc_beta, seed=cfg.seed,
                    checkpoint_dir=str(run_dir / "methods" / "vqlc" / "checkpoint"),
                    device=distributed.device() if distributed.world() > 1 else "cpu", **kw)
    if name == "kmeans":
        from .kmeans import KMeansConcepts

        return KMeansConcepts(n_concepts=cfg.n_concepts, seed=cfg.seed)
    from .lacoat import LACOAT

    return LACOAT(n_concepts=cfg.n_concepts, seed=cfg.seed)


# --- stages --------------------------------------------------------------------------------
def stage_texts(run: Run, log: Callable) -> dict:
    from .sources import load_dataset, split_dataset

    cfg = run.cfg
    ds = load_dataset(cfg.dataset, cache_dir=cfg.cache_dir, text_column=cfg.text_column,
                      label_column=cfg.label_column, limit=cfg.limit, seed=cfg.seed)
    split = split_dataset(ds.labels, ds.groups, seed=cfg.seed)
    df = pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels.astype(np.int64),
                       "split": split, "group": ds.groups if ds.groups is not None else np.arange(len(ds.texts))})
    write_parquet(run.dir / "texts.parquet", df)
    run.manifest.data["class_names"] = list(ds.class_names)
    return {"n_texts": len(df), "splits": df["split"].value_counts().to_dict()}


def stage_extract(run: Run, log: Callable) -> dict:
    from .extract import ExtractConfig, build_store

    cfg, bb = run.cfg, run.backbone
    layer = cfg.layer if cfg.layer is not None else max(1, bb.n_layers - 1)
    bb.check_layer(layer)
    run.manifest.data["layer"] = layer
    run.manifest.data["pooling"] = cfg.pooling or bb.pooling
    ecfg = ExtractConfig(layer=layer, aggregation=cfg.aggregation, pooling=cfg.pooling, batch_size=cfg.batch_size,
                         chunk_texts=cfg.chunk_texts, dtype=cfg.dtype)
    device = distributed.device() if distributed.world() > 1 else "cpu"
    bb.model.to(device)  # each rank's own GPU under torchrun with CUDA
    try:
        store = build_store(bb, run.texts, ecfg, run.dir / "store")
    finally:
        bb.model.to("cpu")
    run._store = store
    return {"n_rows": store.n_rows, "dim": store.dim, "layer": layer}


def stage_classifier(run: Run, log: Callable) -> dict:
    from .classifier import Classifier, pooled_features

    texts, bb = run.texts, run.backbone
    if bb.is_classifier:
        clf = Classifier(bb, run.class_names)
        proba = np.concatenate([clf.predict_proba(texts["text"].iloc[i : i + 32].tolist())
                                for i in range(0, len(texts), 32)])
    else:
        feats = pooled_features(bb, texts["text"].tolist(), batch_size=run.cfg.batch_size,
                                autocast_dtype=run.autocast_dtype)
        train = (texts["split"] == "train").to_numpy()
        clf = Classifier.train(bb, feats[train], texts["label"].to_numpy()[train], run.class_names, seed=run.cfg.seed)
        proba = clf.head_proba(feats)
    pred = proba.argmax(1)
    acc = {s: float((pred[m] == texts["label"].to_numpy()[m]).mean())
           for s in ("train", "dev", "test") if (m := (texts["split"] == s).to_numpy()).any()}
    clf.save(run.dir / "classifier")
    write_json(run.dir / "classifier" / "metrics.json", {"accuracy": acc})
    run._classifier = clf
    return {"accuracy": acc}


def stage_fitset(run: Run, log: Callable) -> dict:
    from .store import fit_set_rows

    cfg, store = run.cfg, run.store
    tokens = store.tokens
    train = tokens[tokens["split"] == "train"]
    rows = train.index.to_numpy()[fit_set_rows(train.reset_index(drop=True), cfg.max_per_word, cfg.min_word_count,
                                                seed=cfg.seed)]
    if len(rows) > cfg.fit_max_rows:
        rng = np.random.default_rng(cfg.seed)
        rows = np.sort(rng.choice(rows, size=cfg.fit_max_rows, replace=False))
    if len(rows) < cfg.n_concepts:
        raise RunError(f"The fit set has {len(rows)} rows but {cfg.n_concepts} concepts were requested; "
                       "lower --n-concepts or use more texts.")
    write_npy(run.dir / "fitset.npy", rows.astype(np.int64))
    return {"n_rows": int(len(rows))}


def stage_method(name: str) -> Callable:
    def run_stage(run: Run, log: Callable) -> dict:
        from .concepts import ConceptSet

        cfg, store = run.cfg, run.store
        rows = read_npy(run.dir / "fitset.npy")
        if name == "vqlc" and cfg.vqlc_fit_on == "all":
            rows = run.store.rows_where(split="train")
        method = make_method(name, cfg, run.dir)
        method.fit(store, rows=rows)  # records fit time and peak memory in method.fit_info_
        if not distributed.is_main():
            return {}  # every rank holds the fitted model; rank 0 assigns and saves
        assignments = method.predict_store(store)
        info = dict(method.fit_info_)
        cs = ConceptSet.from_assignments(name, store, assignments, method.n_concepts, run.class_names,
                                         extra=method.concept_extra(), info=info, seed=cfg.seed)
        method.save(run.dir / "methods" / name / "model")
        cs.save(run.dir / "methods" / name)
        ckpt = run.dir / "methods" / name / "checkpoint"
        shutil.rmtree(ckpt, ignore_errors=True)
        return {"fit_time_s": round(info["fit_time_s"], 2), "peak_rss_mb": round(info["peak_rss_mb"], 1),
                "n_fit_rows": int(len(rows)), "used_concepts": int((cs.summary["size"] > 0).sum())}

    return run_stage


def stage_evaluate(run: Run, log: Callable) -> dict:
    from .faithfulness import faithfulness
    from .metrics import codebook_perplexity, dead_codes

    cfg = run.cfg
    methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
    measures = {}
    dev = run.store.rows_where(split="dev")
    for m, (method, cs) in methods.items():
        sizes = cs.summary["size"].to_numpy()
        a = cs.assignments
        measures[m] = {"perplexity": float(codebook_perplexity(a, cs.n_concepts)),
                       "dead_codes": int(dead_codes(a, cs.n_concepts)),
                       "mean_purity": float(np.average(cs.summary["purity"], weights=np.maximum(sizes, 1e-9))),
                       "size_quantiles": np.quantile(sizes, [0, 0.25, 0.5, 0.75, 1]).tolist(), **cs.info}
        if m == "vqlc" and hasattr(method, "score_store"):
            measures[m].update({f"dev_{k}": v for k, v in method.score_store(run.store, dev).items()})
    texts = run.texts
    test = texts[texts["split"] == "test"]["text"].tolist()[: cfg.faithfulness_texts]
    explainer = run.explainer(methods)
    table = faithfulness(explainer, test, seed=cfg.seed)
    acc = read_json(run.dir / "classifier" / "metrics.json")["accuracy"]
    write_parquet(run.dir / "eval" / "faithfulness.parquet", table)
    write_json(run.dir / "eval" / "measures.json", {"methods": measures, "classifier_accuracy": acc})
    return {"n_texts": len(test)}


def stage_maps(run: Run, log: Callable) -> dict:
    from .maps import concept_map

    for m in run.methods_built():
        cs = run.concept_set(m)
        write_parquet(run.dir / "methods" / m / "map.parquet", concept_map(cs, seed=run.cfg.seed))
    return {"methods": run.methods_built()}


def stage_functions(cfg: BuildConfig) -> list[tuple[str, Callable]]:
    out = [("texts", stage_texts), ("extract", stage_extract), ("classifier", stage_classifier),
           ("fitset", stage_fitset)]
    out += [(m, stage_method(m)) for m in cfg.methods]
    out += [("evaluate", stage_evaluate), ("maps", stage_maps)]
    return out


def build(cfg: BuildConfig, stages: list[str] | None = None, log: Callable = print,
          on_stage: Callable | None = None, force: bool = False, rebuild: str | None = None) -> Run:
    """Run the pipeline for `cfg`, skipping stages already complete. `stages` limits which run
    (e.g. ["texts", "extract"]); `on_stage(i, n, name)` reports progress (the dashboard's bar)."""
    run_dir = cfg.run_dir
    if force and run_dir.exists() and distributed.is_main():
        shutil.rmtree(run_dir)
    distributed.barrier()
    run = Run(run_dir, cfg)
    if run.manifest.path.exists():
        run.manifest.check_version()
        old = run.manifest.data.get("config", {})
        diff = [k for k in ("model", "dataset", "limit", "layer", "pooling", "aggregation", "max_length", "seed",
                            "text_column", "label_column") if old.get(k) != cfg.to_json().get(k)]
        if diff:
            k = diff[0]
            raise RunError(f"Run '{cfg.run}' was built with {k}={old.get(k)!r}, not {cfg.to_json().get(k)!r}; "
                           "choose another --run name or pass --force to rebuild it.")
    distributed.barrier()  # every rank has checked the old config before rank 0 writes the new one
    run.manifest.data["config"] = cfg.to_json()
    if distributed.is_main():
        run.manifest.save()
        if rebuild:
            log(f"[{rebuild}] rebuilding: " + ", ".join(run.invalidate_from(rebuild)) + " invalidated")
    distributed.barrier()
    run.manifest = Manifest(run.dir)  # what rank 0 invalidated
    run.check()  # never build on a finished stage whose files changed since
    todo = [(n, f) for n, f in stage_functions(cfg) if stages is None or n in stages]
    for i, (name, fn) in enumerate(todo):
        if on_stage:
            on_stage(i, len(todo), name)
        if run.manifest.is_complete(name):
            log(f"[{name}] already complete, skipped")
            continue
        log(f"[{name}] running")
        t0 = time.perf_counter()
        info = fn(run, log) if name in SHARDED or distributed.is_main() else {}
        info["wall_s"] = round(time.perf_counter() - t0, 2)
        if distributed.is_main():
            run.manifest.complete(name, **info, files=run.seal(name))
        distributed.barrier()  # the stage's files and its manifest record are written
        if not distributed.is_main():
            run.manifest = Manifest(run.dir)  # what rank 0 recorded (class names, layer, ...)
        log(f"[{name}] done in {info['wall_s']} s: {json.dumps({k: v for k, v in info.items() if k != 'wall_s'})}")
    if on_stage:
        on_stage(len(todo), len(todo), "done")
    return run


def list_runs(cache_dir: str | Path = "cache") -> list[Path]:
    root = Path(cache_dir) / "runs"
    return sorted(p for p in root.iterdir() if (p / "manifest.json").exists()) if root.exists() else []
