"""Training efficiency: achieved GFLOP/s of VQLC training against this machine's matmul rate.

The FLOPs of a whole fit are counted by torch's FlopCounterMode (matmuls, distances, the EMA
update); the same fit is then timed without the counter. The matmul rate is measured in the
same run on fp32 matmuls of the training's own shapes and on a large square one.
Usage: python bench/train_efficiency.py [--rows 100000] [--repeats 3]
Writes bench/results/train_efficiency.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def matmul_rate(m: int, k: int, n: int, repeats: int = 20) -> float:
    """Median GFLOP/s of an (m, k) @ (k, n) fp32 matmul."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * m * k * n / statistics.median(ts) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="rows of the training store (real MiniLM rows)")
    ap.add_argument("--source-run", default="default")
    ap.add_argument("--k", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vqlc_core.data.store import ActivationStore, ArrayStore
    from vqlc_core.methods.vqlc import VQLC

    torch.set_num_threads(a.threads)
    src = ActivationStore(ROOT / "cache" / "runs" / a.source_run / "store")
    x = src.read(np.arange(min(a.rows, src.n_rows)))
    store = ArrayStore(x)
    make = lambda: VQLC(n_concepts=a.k, seed=0, progress=False)  # noqa: E731
    with FlopCounterMode(display=False) as fc:
        est = make().fit(store)
    flops = fc.get_total_flops()
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        make().fit(store)
        times.append(time.perf_counter() - t0)
    fit_s = statistics.median(times)
    d, bs = store.dim, est.batch_size
    rates = {"train shape (B,d)@(d,K)": matmul_rate(bs, d, a.k), "train shape (B,d)@(d,d)": matmul_rate(bs, d, d),
             "square 2048": matmul_rate(2048, 2048, 2048)}
    res = {"rows": len(x), "k": a.k, "epochs": est.history_[-1]["epoch"] if est.history_ else None,
           "batch_size": bs, "threads": a.threads, "total_gflop": round(flops / 1e9, 2), "fit_s_median": round(fit_s, 2),
           "achieved_gflops": round(flops / fit_s / 1e9, 2),
           "matmul_gflops": {k: round(v, 1) for k, v in rates.items()}}
    res["fraction_of_square_matmul"] = round(res["achieved_gflops"] / rates["square 2048"], 3)
    res["fraction_of_train_shape_matmul"] = round(res["achieved_gflops"] / rates["train shape (B,d)@(d,K)"], 3)
    print(json.dumps(res, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "train_efficiency.json", res, indent=2)
    lines = ["| measure | GFLOP/s |", "|---|---:|", f"| VQLC training, achieved ({res['rows']:,} rows, "
             f"{res['total_gflop']} GFLOP in {res['fit_s_median']} s) | {res['achieved_gflops']} |"]
    lines += [f"| matmul {k} | {v:.1f} |" for k, v in rates.items()]
    (RESULTS / "train_efficiency.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    labels = ["VQLC training"] + [f"matmul {k}" for k in rates]
    ax.barh(labels, [res["achieved_gflops"]] + list(rates.values()))
    ax.set_xlabel("GFLOP/s (fp32)")
    fig.tight_layout()
    fig.savefig(RESULTS / "train_efficiency.png", dpi=110)


if __name__ == "__main__":
    main()
