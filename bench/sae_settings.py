"""Which TopK SAE settings: latents L, k, optimiser steps, batch size and learning rate, each
fitted on a run's fit set (read-only) and measured on its dev rows. Settings named without an
lr use sparsify's rate, 2e-4 / sqrt(L / 2^14). Run with one thread (OMP_NUM_THREADS=1).

For each setting: fit wall and CPU time, dev R² of the reconstruction (raw space), mean L0, the
fraction of latents that fire on no dev row and on no fit row, the fraction dead by the
training rule (see `SAEConcepts`), and the final training FVU. Results are merged into the JSON
by (setting, seed).
Usage: python bench/sae_settings.py [--run default] [--settings 4096-32 ...] [--seeds 0]
Writes bench/results/sae_settings.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _sparsify_lr(latents: int) -> float:
    """sparsify's default Adam rate for L latents."""
    return 2e-4 / (latents / 2**14) ** 0.5


# name -> SAEConcepts parameters (the estimator's defaults are the 4096-32-lr1e-3 row)
SETTINGS = {
    "4096-32": dict(n_concepts=4096, k=32, lr=_sparsify_lr(4096)),
    "4096-32-2k": dict(n_concepts=4096, k=32, lr=_sparsify_lr(4096), min_steps=2000),
    "4096-32-lr1e-3": dict(n_concepts=4096, k=32, lr=1e-3),
    "4096-16": dict(n_concepts=4096, k=16, lr=_sparsify_lr(4096)),
    "2048-32": dict(n_concepts=2048, k=32, lr=_sparsify_lr(2048)),
    "1024-32": dict(n_concepts=1024, k=32, lr=_sparsify_lr(1024)),
    "4096-32-noaux": dict(n_concepts=4096, k=32, lr=_sparsify_lr(4096), auxk_alpha=0.0),
    "4096-32-lr1e-3-500": dict(n_concepts=4096, k=32, lr=1e-3, min_steps=500),
    "4096-32-lr2e-3-500": dict(n_concepts=4096, k=32, lr=2e-3, min_steps=500),
    "2048-32-lr1e-3": dict(n_concepts=2048, k=32, lr=1e-3),
    "4096-32-lr1e-3-b512-500": dict(n_concepts=4096, k=32, lr=1e-3, batch_size=512, min_steps=500),
}


def measure(run, name: str, seed: int) -> dict:
    import numpy as np

    from vqlc_core.methods.sae import SAEConcepts

    store = run.store
    fitset = np.load(run.dir / "fitset.npy")
    dev = store.rows_where(split="dev")
    cpu0 = time.process_time()
    m = SAEConcepts(**SETTINGS[name], seed=seed, progress=False).fit(store, rows=fitset)
    cpu = time.process_time() - cpu0
    on_dev, on_fit = m.score_store(store, dev), m.score_store(store, fitset)
    last = m.history_[-1]
    return {"setting": name, "seed": seed, "params": SETTINGS[name], "epochs": m.n_epochs_,
            "fit_s": m.fit_info_["fit_time_s"], "cpu_s": round(cpu, 2), "peak_rss_mb": m.fit_info_["peak_rss_mb"],
            "dev_r2": on_dev["r2"], "dev_l0": on_dev["l0"], "dev_unfired": on_dev["dead_fraction"],
            "fit_unfired": on_fit["dead_fraction"], "dead_by_rule": last["dead_fraction"], "train_fvu": last["fvu"],
            "n_fit_rows": int(len(fitset)), "n_dev_rows": int(len(dev))}


def markdown(rows: list[dict]) -> str:
    cols = ["setting", "seed", "epochs", "fit_s", "cpu_s", "dev_r2", "dev_l0", "dev_unfired", "fit_unfired",
            "dead_by_rule", "train_fvu"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    from vqlc_core.pipeline.run import Run

    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="default")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = ap.parse_args()
    run = Run(ROOT / "cache" / "runs" / args.run)
    path = RESULTS / "sae_settings.json"
    done = {(r["run"], r["setting"], r["seed"]): r for r in (json.loads(path.read_text()) if path.exists() else [])}
    for name in args.settings:
        for seed in args.seeds:
            r = {"run": args.run, **measure(run, name, seed)}
            print(json.dumps(r), flush=True)
            done[(args.run, name, seed)] = r
            write_result(path, list(done.values()))
    (RESULTS / "sae_settings.md").write_text(markdown(list(done.values())))


if __name__ == "__main__":
    main()
