"""VQLC's fit time against K-Means' as the build fits them: on a built run's own fit set (word
concepts on its word rows, prediction concepts on its prediction rows, as `SplitConcepts` does),
each method made by the build's own `build_method` from the run's settings, with VQLC's settings
overridden per variant. Reports, per method and variant, the build's `fit_time_s` (median over
interleaved repeats), the word fit's steps and the time spent before its first step (normalisation
and codebook initialisation), and the quality of the word concepts on held-out rows: dev R² of
each row reconstructed by its concept's mean over the fit rows (`centroid_r2`, as the run's "dev R²
(concept vector)"), the code book's perplexity and dead codes over the fit rows, and the share of
fit rows whose word is its concept's most frequent one (word purity).

Usage: python bench/vqlc_speed.py --run default [--repeats 3] [--threads 1]
           [--variant NAME=JSON ...]     (e.g. --variant bf16='{"autocast": "bf16"}')
Writes bench/results/vqlc_speed_<run>.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def word_purity(words: np.ndarray, assign: np.ndarray) -> float:
    """Share of rows whose word is the most frequent word of their concept."""
    import pandas as pd

    df = pd.DataFrame({"w": words, "k": assign})
    top = df.groupby("k")["w"].agg(lambda s: s.value_counts().iloc[0])
    return float(top.sum() / len(df))


def fit_once(run, name: str, overrides: dict, rows: np.ndarray, seed: int, threads: int) -> dict:
    import torch

    from vqlc_core.methods.concepts import concept_means
    from vqlc_core.methods.metrics import centroid_r2, perplexity_from_counts
    from vqlc_core.methods.split import build_method
    from vqlc_core.methods.trainer import on_step

    torch.set_num_threads(threads)
    mcfg = run.cfg.methods
    store = run.store
    with tempfile.TemporaryDirectory() as tmp:
        method = build_method(name, mcfg, seed, Path(tmp), store, rows, device="cpu")
        words = getattr(method, "words", method)
        for k, v in overrides.items():
            setattr(words, k, v)
            if hasattr(method, "predictions"):
                setattr(method.predictions, k, v)
        words.progress = False
        marks = {}
        t0 = time.perf_counter()
        if hasattr(words, "_build"):
            with on_step(words, lambda m, step: marks.setdefault("first", time.perf_counter()) if step == 0 else None):
                method.fit(store, rows=rows)
        else:
            method.fit(store, rows=rows)
        wall = time.perf_counter() - t0
        info = dict(method.fit_info_)
    tokens = store.tokens
    kind = tokens["kind"].to_numpy()
    fit_words = rows[kind[rows] != "pred"]
    dev = np.flatnonzero((tokens["split"].to_numpy() == "dev") & (kind != "pred"))
    assign = np.full(store.n_rows, -1, dtype=np.int64)
    assign[fit_words] = words.predict(store.read(fit_words))
    assign[dev] = words.predict(store.read(dev))
    vectors, _, _ = concept_means(store, np.maximum(assign, 0), words.n_concepts, rows=fit_words)
    counts = np.bincount(assign[fit_words], minlength=words.n_concepts)
    hist = getattr(words, "history_", None) or []
    return {"fit_time_s": info["fit_time_s"], "wall_s": wall,
            "word_fit_s": (info.get("prediction_fit") and info["fit_time_s"] - info["prediction_fit"]["fit_time_s"]),
            "before_first_step_s": (marks["first"] - t0) if "first" in marks else None,
            "steps": sum(h.get("steps", 0) for h in hist) or None,
            "dev_r2": float(centroid_r2(store, dev, assign, vectors)),
            "perplexity": float(perplexity_from_counts(counts)), "dead_codes": int((counts == 0).sum()),
            "purity": word_purity(tokens["word"].to_numpy()[fit_words], assign[fit_words])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="default", help="a built run under the cache")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; times are medians")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the build's default is every core)")
    ap.add_argument("--seed", type=int, default=0, help="the methods' seed")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="a VQLC variant: estimator attributes to override, as JSON (repeatable)")
    ap.add_argument("--no-kmeans", action="store_true", help="leave K-Means out")
    ap.add_argument("--rows", choices=("fitset", "all"), default="fitset",
                    help="fit on the run's fit set, or on every train row (word and prediction rows)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from vqlc_core.pipeline.run import open_run

    run = open_run(args.run)
    rows = np.load(run.dir / "fitset.npy") if args.rows == "fitset" else run.store.rows_where(split="train")
    plan = ([] if args.no_kmeans else [("kmeans", "kmeans", {})]) + [("vqlc (build)", "vqlc", {})]
    for v in args.variant:
        name, _, js = v.partition("=")
        plan.append((name, "vqlc", json.loads(js)))
    got: dict[str, list[dict]] = {label: [] for label, _, _ in plan}
    for r in range(args.repeats):
        for label, name, over in (plan if r % 2 == 0 else plan[::-1]):
            got[label].append(fit_once(run, name, over, rows, args.seed, args.threads))
            print(label, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in got[label][-1].items()}, flush=True)
    summary = {}
    for label, runs in got.items():
        s = {k: statistics.median([x[k] for x in runs]) for k in ("fit_time_s", "wall_s")}
        s.update({k: runs[0][k] for k in ("steps", "dev_r2", "perplexity", "dead_codes", "purity")})
        s["before_first_step_s"] = runs[0]["before_first_step_s"] and statistics.median(
            [x["before_first_step_s"] for x in runs])
        summary[label] = s
    n_pred = int((run.store.tokens["kind"].to_numpy()[rows] == "pred").sum())
    out = {"run": args.run, "threads": args.threads, "repeats": args.repeats, "fit_rows": int(len(rows)),
           "prediction_rows": n_pred, "variants": dict((lbl, over) for lbl, _, over in plan), "summary": summary,
           "raw": got, "load_average": os.getloadavg()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out["rows"] = args.rows
    (RESULTS / f"vqlc_speed_{args.run}{'' if args.rows == 'fitset' else '_all'}.json").write_text(json.dumps(out, indent=1))
    print(f"\n{len(rows):,} fit rows ({n_pred:,} predictions), {args.threads} thread(s), median of {args.repeats}")
    print("| method | fit_time_s | before first step (s) | steps | dev R² | perplexity | dead | purity |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, s in summary.items():
        b = s["before_first_step_s"]
        print(f"| {label} | {s['fit_time_s']:.2f} | {'' if b is None else f'{b:.2f}'} | {s['steps'] or ''} | "
              f"{s['dev_r2']:.4f} | {s['perplexity']:.0f} | {s['dead_codes']} | {s['purity']:.3f} |")


if __name__ == "__main__":
    main()
