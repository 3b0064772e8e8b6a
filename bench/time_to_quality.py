"""Time to quality: how fast VQLC and its peers reach a good code book, as curves of quality
against wall time (issue 30, item 1).

Quality is the held-out R² of the dev rows reconstructed by their concept's vector, the mean of
the concept's fit (train) members, as the run's "dev R² (concept vector)" (`centroid_r2` over
`concept_means`), with K = 400. Alongside it every point records the code book's perplexity and
dead codes over the fit rows' assignments and the process's peak RSS so far.

The fit rows are N train rows of a built run (a seeded sample below its train-row count; beyond
it every train row, then train rows repeated with seeded noise of 1% of each dimension's std, as
bench/scale.py makes its stores), written as a float16 store on disk; the dev rows are the run's
dev rows. Methods, one thread each:

- vqlc: the package's VQLC with its default options, evaluated through the trainer's `on_step`
  hook at step 0 (initialised, untrained) and on a geometric grid of steps up to its most,
  and at the step where it stopped by convergence.
- minibatch: scikit-learn MiniBatchKMeans streamed with `partial_fit` over shuffled store
  batches of 4,096 rows (as the package's streamed K-Means), for at least 150 batches, evaluated
  on a geometric grid of batches.
- faiss / faiss-all: faiss-cpu KMeans with its default subsampling (max_points_per_centroid = 256)
  and on all points, evaluated after 1, 3, 10 and 25 (its default) iterations. Where N ≤ 256·K the
  default takes every point, so the two are one computation, run once.
- kmeans: scikit-learn KMeans (k-means++, n_init = 1), evaluated after 1, 3, 10 and 30 Lloyd
  iterations and at convergence (max_iter 300, tol 1e-4), as one chain of warm-started fits
  (each continuing from the previous centroids), so the curve costs one fit.

Evaluation time is excluded from the times. Every (method, repeat) fit runs in a fresh process
(its peak RSS, `VmHWM` since the fit began, is its own); repeats are interleaved, the order of
methods rotating, and every point's time is the median over repeats (fits are seeded alike, so
the R² of a point is the same in every repeat).

Usage: python bench/time_to_quality.py [--sizes 10000 100000 [1000000]] [--repeats 3]
Writes bench/results/time_to_quality.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from scale import peak_rss_mb, write_tiled  # bench/ is on the path: the script's folder, or pytest's pythonpath

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
METHODS = ("vqlc", "minibatch", "faiss", "faiss-all", "kmeans")
LABELS = {"vqlc": "VQLC", "minibatch": "MiniBatchKMeans", "faiss": "faiss KMeans (default sampling)",
          "faiss-all": "faiss KMeans (all points)", "kmeans": "sklearn KMeans"}
MB_BATCH = 4096  # MiniBatchKMeans' batch, the package's streamed K-Means default
MB_MIN_BATCHES = 150  # enough for its curve to flatten at 10k and 100k rows; one pass at 1M
FAISS_ITERS = (1, 3, 10, 25)  # 25 is faiss' default niter
KMEANS_ITERS = (1, 3, 10, 30)  # then on to convergence
FAISS_SAMPLE = 256  # faiss' default max_points_per_centroid
CHUNK = 8192  # rows per evaluation chunk, so evaluating adds little to the peak RSS


# ---- stores ---------------------------------------------------------------------------------

def make_fit_store(n: int, source_run: str = "default", seed: int = 0, noise: float = 0.01) -> Path:
    """cache/bench/ttq-<run>-<n>: n train rows of `source_run` as a float16 store: a seeded sample
    when n is below the run's train rows, else all of them followed by noisy repeats (relative
    noise, as bench/scale.py's `make_store`, but of train rows only, so dev rows stay held out)."""
    from vqlc_core.data.store import ActivationStore

    out = ROOT / "cache" / "bench" / f"ttq-{source_run}-{n}"
    if (out / "store.json").exists():
        return out
    src = ActivationStore(ROOT / "cache" / "runs" / source_run / "store")
    train = src.rows_where(split="train")
    rng = np.random.default_rng(seed)
    if n <= len(train):
        real = src.read(np.sort(rng.choice(train, size=n, replace=False)))
    else:
        real = src.read(train)
    return write_tiled(real, n, out, rng, noise)


def dev_rows(source_run: str = "default") -> np.ndarray:
    """The dev rows of `source_run`'s store, float32 (N_dev, d)."""
    from vqlc_core.data.store import ActivationStore

    src = ActivationStore(ROOT / "cache" / "runs" / source_run / "store")
    return src.read(src.rows_where(split="dev"))


# ---- measuring one point --------------------------------------------------------------------

def _reset_peak() -> None:
    """Reset this process's VmHWM to its current RSS (Linux); elsewhere a no-op."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def one_thread() -> None:
    """One thread for torch, the BLAS behind numpy and scikit-learn, and faiss."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except ImportError:
        pass


def quality(assign, store, dev: np.ndarray, k: int) -> dict:
    """Dev R² by concept vector (the mean of each concept's fit rows), perplexity and dead codes
    over the fit rows' assignments; `assign` maps an (n, d) float32 chunk to concept ids."""
    from vqlc_core.data.store import ArrayStore
    from vqlc_core.methods.concepts import concept_means
    from vqlc_core.methods.metrics import centroid_r2, codebook_use

    a_fit = np.concatenate([np.asarray(assign(x.numpy())) for x in store.iter_batches(CHUNK, shuffle=False)])
    vectors, _, _ = concept_means(store, a_fit, k, batch_size=CHUNK)
    a_dev = np.concatenate([np.asarray(assign(dev[s : s + CHUNK])) for s in range(0, len(dev), CHUNK)])
    use = codebook_use(a_fit, k)
    return {"r2": float(centroid_r2(ArrayStore(dev), None, a_dev, vectors, batch_size=CHUNK)),
            "perplexity": round(use["perplexity"], 2), "dead_codes": use["dead_codes"]}


def geometric(total: int, n: int = 14) -> set[int]:
    """About n points from 1 to total, evenly spaced in log, total included."""
    return {int(v) for v in np.unique(np.geomspace(1, max(total, 1), n).round())} | {total}


class Clock:
    """Fit time with the evaluations taken out: `point` records a curve point after evaluating."""

    def __init__(self, store, dev: np.ndarray, k: int):
        self.store, self.dev, self.k = store, dev, k
        self.points: list[dict] = []
        _reset_peak()
        self.paused = 0.0
        self.t0 = time.perf_counter()

    def point(self, at: int, assign) -> None:
        seconds, rss = time.perf_counter() - self.t0 - self.paused, peak_rss_mb()
        t = time.perf_counter()
        self.points.append({"at": at, "seconds": seconds, "peak_rss_mb": round(rss, 1),
                            **quality(assign, self.store, self.dev, self.k)})
        self.paused += time.perf_counter() - t


# ---- one fit per method, as a curve -----------------------------------------------------------

def _centroids(C: np.ndarray):
    from vqlc_core.methods.kmeans import nearest_centroid

    C = np.asarray(C, dtype=np.float32).copy()
    return lambda x: nearest_centroid(x, C)[0]


def curve_vqlc(store, dev, k, seed) -> list[dict]:
    """VQLC with its default options; points at step 0 and on a geometric grid of steps."""
    from vqlc_core.methods.trainer import on_step
    from vqlc_core.methods.vqlc import VQLC

    est = VQLC(n_concepts=k, seed=seed, progress=False)
    steps = est.epochs_for(store.n_rows) * math.ceil(store.n_rows / est.batch_size)
    grid = geometric(steps) | {0}
    clock = Clock(store, dev, k)
    with on_step(est, lambda m, step: clock.point(step, m.predict) if step in grid else None):
        est.fit(store)
    trained = sum(h["steps"] for h in est.history_)
    if clock.points[-1]["at"] != trained:  # it stopped by convergence between grid points
        clock.point(trained, est.predict)
    return clock.points


def curve_minibatch(store, dev, k, seed) -> list[dict]:
    """MiniBatchKMeans streamed through `partial_fit`; points on a geometric grid of batches."""
    from sklearn.cluster import MiniBatchKMeans

    bs = max(MB_BATCH, k)
    per_pass = math.ceil(store.n_rows / bs)
    passes = max(1, math.ceil(MB_MIN_BATCHES / per_pass))
    grid = geometric(passes * per_pass)
    clock = Clock(store, dev, k)
    km = MiniBatchKMeans(n_clusters=k, init="k-means++", n_init=1, batch_size=bs, random_state=seed)
    done = 0
    for epoch in range(passes):
        for x in store.iter_batches(bs, shuffle=True, seed=seed + epoch):
            km.partial_fit(x.numpy())
            done += 1
            if done in grid:
                clock.point(done, _centroids(km.cluster_centers_))
    return clock.points


def curve_faiss(store, dev, k, seed, sample: bool = True) -> list[dict]:
    """faiss KMeans (random init), default subsampling or all points, chained over FAISS_ITERS."""
    import faiss

    clock = Clock(store, dev, k)
    X = np.ascontiguousarray(store.read_all())  # (N, d): faiss holds every point
    per_centroid = FAISS_SAMPLE if sample else math.ceil(len(X) / k) + 1
    C, done = None, 0
    for it in FAISS_ITERS:
        km = faiss.Kmeans(X.shape[1], k, niter=it - done, seed=seed + 1234, max_points_per_centroid=per_centroid)
        km.train(X, init_centroids=C)
        C, done = km.centroids, it
        clock.point(it, _centroids(C))
    return clock.points


def curve_kmeans(store, dev, k, seed) -> list[dict]:
    """scikit-learn KMeans, chained over KMEANS_ITERS, then to convergence (its `at` is the
    total number of Lloyd iterations)."""
    import warnings

    from sklearn.cluster import KMeans

    clock = Clock(store, dev, k)
    X = store.read_all()  # (N, d): K-Means holds every fit row, as the package's does
    init, done = "k-means++", 0
    for it in (*KMEANS_ITERS, None):
        max_iter = 300 - done if it is None else it - done
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "did not converge" at the capped points is the point
            km = KMeans(n_clusters=k, init=init, n_init=1, max_iter=max_iter, random_state=seed).fit(X)
        init, done = km.cluster_centers_, done + int(km.n_iter_)
        clock.point(done, _centroids(km.cluster_centers_))
        if it is not None and km.n_iter_ < max_iter:
            break  # converged before the cap
    return clock.points


def fit_curve(method: str, store, dev: np.ndarray, k: int, seed: int = 0) -> list[dict]:
    """One fit of `method` on the store's rows, as its curve of points."""
    one_thread()
    if method == "vqlc":
        return curve_vqlc(store, dev, k, seed)
    if method == "minibatch":
        return curve_minibatch(store, dev, k, seed)
    if method in ("faiss", "faiss-all"):
        return curve_faiss(store, dev, k, seed, sample=method == "faiss")
    if method == "kmeans":
        return curve_kmeans(store, dev, k, seed)
    raise ValueError(f"Unknown method {method!r}; choose from {', '.join(METHODS)}.")


# ---- repeats, medians, summary ------------------------------------------------------------------

def faiss_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def median_curve(runs: list[list[dict]]) -> list[dict]:
    """Point by point over repeats: the median time, peak RSS and R² (equal in every repeat)."""
    out = []
    for pts in zip(*runs):
        out.append({**pts[0], "seconds": round(statistics.median(p["seconds"] for p in pts), 6),
                    "seconds_all": [round(p["seconds"], 6) for p in pts],
                    "r2": round(statistics.median(p["r2"] for p in pts), 4),
                    "peak_rss_mb": round(statistics.median(p["peak_rss_mb"] for p in pts), 1)})
    return out


def first_time(curve: list[dict], r2: float) -> float | None:
    """The time of the first point whose R² reaches r2 (None if none does)."""
    return next((p["seconds"] for p in curve if p["r2"] >= r2), None)


def summarize(curves: dict[str, list[dict]], tol: float = 0.001) -> dict:
    """Per method: final R², time to its own final R² (within `tol`), time to 95% of the best R²
    of any method, fit time and peak RSS; and that best R²."""
    best = max(p["r2"] for c in curves.values() for p in c)
    out = {"best_r2": best, "methods": {}}
    for m, c in curves.items():
        final = c[-1]["r2"]
        out["methods"][m] = {"final_r2": final, "time_to_final_s": first_time(c, final - tol),
                             "time_to_95pct_best_s": first_time(c, 0.95 * best), "fit_s": c[-1]["seconds"],
                             "peak_rss_mb": max(p["peak_rss_mb"] for p in c),
                             "perplexity": c[-1]["perplexity"], "dead_codes": c[-1]["dead_codes"]}
    return out


def time_to_quality(store, dev: np.ndarray, methods=METHODS, k: int = 400, repeats: int = 3, seed: int = 0,
                    fit=None, log=print) -> dict:
    """The curves of `methods` on the store's rows (medians over `repeats` interleaved fits, the
    order of methods rotating) and their summary. `fit(method)` makes one curve; by default
    `fit_curve` in this process."""
    fit = fit or (lambda m: fit_curve(m, store, dev, k, seed))
    skipped = {}
    if not faiss_available():
        skipped.update({m: "faiss-cpu is not installed (pip install -r requirements-bench.txt)"
                        for m in methods if m.startswith("faiss")})
    if "faiss" in methods and "faiss-all" in methods and store.n_rows <= FAISS_SAMPLE * k:
        skipped["faiss-all"] = f"same computation as faiss: N ≤ {FAISS_SAMPLE}·K, so its default samples every point"
    run = [m for m in methods if m not in skipped]
    runs: dict[str, list] = {m: [] for m in run}
    for r in range(repeats):
        for m in run[r % len(run):] + run[: r % len(run)]:
            runs[m].append(fit(m))
            last = runs[m][-1][-1]
            log(f"  N={store.n_rows:,} repeat {r + 1}/{repeats} {m}: {last['seconds']:.1f} s, R² {last['r2']:.4f}")
    curves = {m: median_curve(runs[m]) for m in run}
    if skipped.get("faiss-all", "").startswith("same computation"):
        curves["faiss-all"] = curves["faiss"]
    return {"n_rows": store.n_rows, "k": k, "repeats": repeats, "curves": curves, "notes": skipped,
            **summarize(curves)}


# ---- the command line: fresh processes, results, table and plot ---------------------------------

def child_fit(method: str, store_path: Path, source_run: str, k: int, seed: int, timeout: float) -> list[dict]:
    """One fit in a fresh one-threaded process (its peak RSS is its own)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.run([sys.executable, __file__, "--child", method, str(store_path), "--source-run", source_run,
                        "--k", str(k), "--seed", str(seed)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{method} failed: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    """The Markdown summary table: one row per (N, method)."""
    lines = ["| rows | method | final R² | time to its final R² (s) | time to 95% of best R² (s) | fit (s) | "
             "perplexity | dead codes | peak RSS (MB) |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n, res in sorted(results.items(), key=lambda kv: int(kv[0])):
        for m, s in res["methods"].items():
            fmt = lambda v: "never" if v is None else f"{v:.2f}"  # noqa: E731
            lines.append(f"| {int(n):,} | {LABELS[m]} | {s['final_r2']:.4f} | {fmt(s['time_to_final_s'])} | "
                         f"{fmt(s['time_to_95pct_best_s'])} | {s['fit_s']:.2f} | {s['perplexity']:.0f} | "
                         f"{s['dead_codes']} | {s['peak_rss_mb']:.0f} |")
        lines.append(f"| {int(n):,} | *best R² of any method* | {res['best_r2']:.4f} | | | | | | |")
    notes = sorted({f"{m}: {why}" for res in results.values() for m, why in res.get("notes", {}).items()})
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


def plot(results: dict, path: Path) -> None:
    """R² against seconds (log x), one panel per N; the dotted line is 95% of the best R²."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(results, key=int)
    fig, axes = plt.subplots(1, len(ns), figsize=(6 * len(ns), 4.2), squeeze=False)
    for ax, n in zip(axes[0], ns):
        res = results[n]
        for m, c in res["curves"].items():
            if m == "faiss-all" and res.get("notes", {}).get(m):
                continue  # drawn as faiss
            ax.plot([p["seconds"] for p in c], [p["r2"] for p in c], "o-", ms=3, label=LABELS[m])
        ax.axhline(0.95 * res["best_r2"], ls=":", c="grey", lw=1, label="95% of best")
        ax.set_xscale("log"), ax.set_xlabel("seconds (one thread, loaded machine)"), ax.set_ylabel("dev R²")
        ax.set_title(f"N = {int(n):,}, K = {res['k']}"), ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="fit rows N")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved fits per method; times are medians")
    ap.add_argument("--k", type=int, default=400)
    ap.add_argument("--source-run", default="default", help="built run whose train and dev rows are used")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=3600, help="seconds before one fit is abandoned")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        from vqlc_core.data.store import ActivationStore

        dev = dev_rows(a.source_run)
        print(json.dumps(fit_curve(a.child[0], ActivationStore(a.child[1]), dev, a.k, a.seed)))
        return
    from vqlc_core.data.store import ActivationStore

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "time_to_quality.json"
    saved = json.loads(out.read_text()) if out.exists() else {}
    results = saved.get("results", {})
    dev = dev_rows(a.source_run)
    for n in a.sizes:
        path = make_fit_store(n, a.source_run, seed=a.seed)
        print(f"N = {n:,}: {path}", flush=True)
        res = time_to_quality(ActivationStore(path), dev, a.methods, a.k, a.repeats, a.seed,
                              fit=lambda m: child_fit(m, path, a.source_run, a.k, a.seed, a.timeout),
                              log=lambda s: print(s, flush=True))
        results[str(n)] = {**res, "n_dev": len(dev), "command": "python bench/time_to_quality.py " + " ".join(sys.argv[1:])}
        from results_io import write_result

        write_result(out, {"source_run": a.source_run, "note": "one thread per fit; times are medians of "
                           "interleaved repeats on a shared, loaded 2-core machine: compare ratios", "results": results})
    (RESULTS / "time_to_quality.md").write_text(table(results))
    plot(results, RESULTS / "time_to_quality.png")
    print(table(results))


if __name__ == "__main__":
    main()
