"""Memory and time as the corpus grows: VQLC, KMeans, MiniBatchKMeans and LACOAT side by side.

Stores of N rows (d = 384) are made on disk from the real MiniLM rows of a built run; beyond
the real count, real rows are repeated with small seeded noise. Every (method, N) fit runs in a
fresh process, so its peak RSS (VmHWM) is its own. LACOAT runs only where its memory
estimate is within the budget; elsewhere the estimate is recorded.

Usage: python bench/scale.py --sizes 10000 100000 1000000 --methods vqlc kmeans minibatch lacoat
Writes bench/results/scale.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SIZES = [10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000]


def make_store(n: int, source_run: str, out: Path, seed: int = 0, noise: float = 0.01) -> Path:
    """A store of n rows: the real rows of `source_run`, then noisy repeats (relative noise)."""
    import numpy as np

    from vqlc_core.data.store import ActivationStore

    if (out / "store.json").exists():
        return out
    src = ActivationStore(ROOT / "cache" / "runs" / source_run / "store")
    return write_tiled(src.read_all(), n, out, np.random.default_rng(seed), noise)


def write_tiled(real, n: int, out: Path, rng, noise: float = 0.01) -> Path:
    """A float16 store of n rows at `out`: the rows `real`, then noisy repeats of them drawn with
    `rng` (noise relative to each dimension's spread)."""
    import numpy as np

    from vqlc_core.data.store import ShardWriter, finalize_store

    scale = real.std(0, keepdims=True) * noise
    out.mkdir(parents=True, exist_ok=True)
    w = ShardWriter(out, real.shape[1], 65536)
    done = 0
    while done < n:
        take = min(len(real), n - done)
        block = real[:take] if done < len(real) else real[rng.integers(0, len(real), take)]
        if done >= len(real):
            block = block + rng.standard_normal(block.shape).astype(np.float32) * scale
        w.append(block)
        done += take
    w.close()
    finalize_store(out, {"n_rows": n, "dim": real.shape[1], "shard_rows": 65536, "dtype": "float16",
                         "shards": [ShardWriter.shard_name(i) for i in range(w.n_shards)]})
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Unlike ru_maxrss it starts afresh at exec, so
    it does not inherit the parent's high-water mark."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fit_child(method: str, store_path: str, k: int, seed: int) -> dict:
    import numpy as np

    from vqlc_core.methods.registry import method_class
    from vqlc_core.data.store import ActivationStore

    store = ActivationStore(store_path)
    base = peak_rss_mb()
    # "minibatch" is K-Means streamed through MiniBatchKMeans; every other name is a registered method.
    kw = {"progress": False} if method == "vqlc" else {"minibatch": True} if method == "minibatch" else {}
    est = method_class("kmeans" if method == "minibatch" else method)(n_concepts=k, seed=seed, **kw)
    t0 = time.perf_counter()
    est.fit(store, rows=np.arange(store.n_rows))
    dt = time.perf_counter() - t0
    peak = peak_rss_mb()
    return {"fit_s": round(dt, 2), "peak_rss_mb": round(peak, 1), "rss_before_fit_mb": round(base, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="store sizes in rows")
    ap.add_argument("--methods", nargs="+", default=["vqlc", "kmeans", "minibatch", "lacoat"],
                    choices=["vqlc", "kmeans", "minibatch", "lacoat"])
    ap.add_argument("--k", type=int, default=400, help="concepts (default 400, as in the paper)")
    ap.add_argument("--source-run", default="default", help="built run whose real rows seed the stores")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds before a single fit is abandoned")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(fit_child(a.child[0], a.child[1], a.k, a.seed)))
        return
    from vqlc_core.methods.lacoat import estimate_memory, max_rows_within
    import psutil

    budget = 0.5 * psutil.virtual_memory().available
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / "scale.json"
    results = json.loads(out_json.read_text()) if out_json.exists() else []
    for n in a.sizes:
        path = make_store(n, a.source_run, ROOT / "cache" / "bench" / f"scale-{n}")
        for m in a.methods:
            results = [r for r in results if not (r["method"] == m and r["n_rows"] == n)]
            row = {"method": m, "n_rows": n, "k": a.k}
            if m == "lacoat" and estimate_memory(n, 384) > budget:
                row.update(status="refused", estimate_gb=round(estimate_memory(n, 384) / 1e9, 1),
                           budget_gb=round(budget / 1e9, 1), max_rows=max_rows_within(budget, 384))
            else:
                try:
                    p = subprocess.run([sys.executable, __file__, "--child", m, str(path), "--k", str(a.k),
                                        "--seed", str(a.seed)], capture_output=True, text=True, cwd=ROOT,
                                       timeout=a.timeout)
                    if p.returncode == 0:
                        row.update(status="ok", **json.loads(p.stdout.strip().splitlines()[-1]))
                    else:
                        row.update(status="failed", error=p.stderr.strip().splitlines()[-1][:300])
                except subprocess.TimeoutExpired:
                    row.update(status="timeout", fit_s=f">{a.timeout}")
            print(json.dumps(row), flush=True)
            results.append(row)
            write_result(out_json, results, indent=2)
    report(results)


def report(results: list[dict]) -> None:
    """The Markdown table and the PNG plot from the JSON results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["| method | rows | status | fit (s) | peak RSS (MB) |", "|---|---:|---|---:|---:|"]
    for r in sorted(results, key=lambda r: (r["method"], r["n_rows"])):
        extra = f"estimate {r['estimate_gb']} GB > budget {r['budget_gb']} GB" if r["status"] == "refused" else ""
        lines.append(f"| {r['method']} | {r['n_rows']:,} | {r['status']} {extra} | {r.get('fit_s', '')} | "
                     f"{r.get('peak_rss_mb', '')} |")
    (RESULTS / "scale.md").write_text("\n".join(lines) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in sorted({r["method"] for r in results}):
        ok = sorted((r for r in results if r["method"] == m and r["status"] == "ok"), key=lambda r: r["n_rows"])
        if ok:
            axes[0].plot([r["n_rows"] for r in ok], [r["peak_rss_mb"] for r in ok], "o-", label=m)
            axes[1].plot([r["n_rows"] for r in ok], [r["fit_s"] for r in ok], "o-", label=m)
    for ax, t in zip(axes, ["peak RSS (MB)", "fit time (s)"]):
        ax.set_xscale("log"), ax.set_xlabel("rows"), ax.set_title(t), ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "scale.png", dpi=110)


if __name__ == "__main__":
    main()
