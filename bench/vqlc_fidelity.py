"""Does VQLC's code space keep the geometry of the model's space? (The choice of its encoder
constraint and of the count a re-seeded code starts with.)

Variants, each fitted on the default store's fit set (K = 400, the default epochs):
  paper       no constraint on the encoder's projection P; re-seeded codes start at the
              dead threshold (the rule before issue #14)
  reseed      no constraint; re-seeded codes start at the uniform share of the counts
  zscaled     (b) the encoding rescaled to the input's norm, z·||h||/||z||; re-seed at share
  ortho-λ     (a) penalty λ·||PᵀP - I||²_F / d on P; re-seed at share
  fixedP      (c) P frozen at the identity (an exact isometry); re-seed at share
For each: dev R² in the raw space (decoder reconstruction), dev R² of the concepts' mean member
state in the model's space (means over fit rows; what ablation removes), perplexity and dead
codes on the fit set and on all rows, P's singular values, mean ||z||²/d against the
normalised states' ||h||²/d (fit rows), the commitment loss of the first and last epoch, the
number of re-seeded codes, fit wall and CPU time. A K-Means row (n_init=1) gives the centroid
R² reference. Results are merged into the JSON by (variant, seed), so seeds can be added by a
second call; the markdown averages over the seeds present.
Usage: python bench/vqlc_fidelity.py [--variants ...] [--seeds 0] [--no-kmeans]
The recorded table: `python bench/vqlc_fidelity.py --seeds 0`, then
`python bench/vqlc_fidelity.py --seeds 1 2 --variants paper ortho-4`.
Writes bench/results/vqlc_fidelity.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # a shared machine: one thread for every library

import argparse
import json
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
STORE = ROOT / "cache" / "runs" / "refactor"

VARIANTS = {
    "paper": dict(ortho_weight=0.0, reseed_at_threshold=True),
    "reseed": dict(ortho_weight=0.0),
    "zscaled": dict(ortho_weight=0.0, z_scaled=True),
    "ortho-0.4": dict(ortho_weight=0.4),
    "ortho-4": dict(ortho_weight=4.0),
    "ortho-40": dict(ortho_weight=40.0),
    "fixedP": dict(ortho_weight=0.0, fixed_projection=True),
}


def variant(name: str, seed: int):
    """A VQLC estimator for the variant; settings the library does not offer are patched into
    the model that `_build` returns."""
    import torch

    from vqlc_core.methods.vq import EMACodebook
    from vqlc_core.methods.vqlc import VQLC

    class ReseedAtThreshold(EMACodebook):
        """The rule before issue #14: a re-seeded code starts at the dead threshold."""

        @torch.no_grad()
        def replace_dead_codes_(self, z, dists):
            dead = torch.nonzero(self.cluster_size < self.dead_threshold).squeeze(1)
            n = super().replace_dead_codes_(z, dists)
            self.cluster_size[dead[:n]] = self.dead_threshold
            self.embed_avg[dead[:n]] = self.embed[dead[:n]] * self.dead_threshold
            return n

    opts = dict(VARIANTS[name])
    at_threshold, z_scaled, fixed = (opts.pop(k, False)
                                     for k in ("reseed_at_threshold", "z_scaled", "fixed_projection"))
    est = VQLC(n_concepts=400, seed=seed, progress=False, **opts)
    build = est._build

    def _build(dim: int):
        model = build(dim)
        if at_threshold:
            model.codebook.__class__ = ReseedAtThreshold
        if fixed:
            model.encoder.proj.weight.requires_grad_(False)
        if z_scaled:
            encode = model.encoder.forward
            model.encoder.forward = lambda h: (lambda z: z * (h.norm(dim=1, keepdim=True)
                                                              / z.norm(dim=1, keepdim=True).clamp_min(1e-8)))(encode(h))
        return model

    est._build = _build
    return est


def centroid_r2(assign_fit, x_fit, assign_dev, x_dev, k: int) -> float:
    """R² of dev rows replaced by their concept's mean fit-row state (the fit mean for a concept
    with no fit rows)."""
    import numpy as np

    from vqlc_core.methods.metrics import r2_score

    counts = np.bincount(assign_fit, minlength=k)
    means = np.zeros((k, x_fit.shape[1]))
    np.add.at(means, assign_fit, x_fit)
    means = np.where(counts[:, None] > 0, means / np.maximum(counts, 1)[:, None], x_fit.mean(0))
    return r2_score(x_dev, means[assign_dev])


def measure_vqlc(name: str, seed: int, store, fit, dev, x_fit, x_dev) -> dict:
    import torch

    est = variant(name, seed)
    cpu0, t0 = time.process_time(), time.perf_counter()
    est.fit(store, rows=fit)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    sv = torch.linalg.svdvals(est.model_.encoder.proj.weight.detach())
    with torch.no_grad():
        h = est.model_.normalize(torch.from_numpy(x_fit))
    z = est.transform(x_fit)
    on_dev, on_fit, on_all = (est.score_store(store, rows) for rows in (dev, fit, None))
    hist = est.history_
    return {"variant": name, "seed": seed, "params": VARIANTS[name],
            "dev_r2": on_dev["r2"],
            "dev_centroid_r2": centroid_r2(est.predict(x_fit), x_fit, est.predict(x_dev), x_dev, 400),
            "fit_r2": on_fit["r2"], "perplexity_fit": on_fit["perplexity"], "dead_codes_fit": on_fit["dead_codes"],
            "perplexity_all": on_all["perplexity"], "dead_codes_all": on_all["dead_codes"],
            "p_sv_min": float(sv.min()), "p_sv_max": float(sv.max()), "p_sv_median": float(sv.median()),
            "z_sq_per_dim": float((z**2).sum(1).mean() / z.shape[1]),
            "h_sq_per_dim": float(h.pow(2).sum(1).mean() / h.shape[1]),
            "commit_first": hist[0]["commit"], "commit_last": hist[-1]["commit"],
            "commit_by_epoch": [round(e["commit"], 4) for e in hist],
            "rec_by_epoch": [round(e["rec"], 4) for e in hist],
            "reseeded": int(sum(e["replaced"] for e in hist)), "epochs": len(hist),
            "fit_s": round(wall, 1), "fit_cpu_s": round(cpu, 1)}


def measure_kmeans(seed: int, store, x_fit, x_dev) -> dict:
    import numpy as np
    from sklearn.cluster import KMeans

    from vqlc_core.methods.metrics import perplexity_from_counts

    cpu0, t0 = time.process_time(), time.perf_counter()
    km = KMeans(400, n_init=1, random_state=seed).fit(x_fit)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    counts_fit = np.bincount(km.labels_, minlength=400)
    counts_all = sum(np.bincount(km.predict(x.numpy()), minlength=400) for x in store.iter_batches(8192, shuffle=False))
    return {"variant": "kmeans", "seed": seed, "params": {"n_init": 1},
            "dev_centroid_r2": centroid_r2(km.labels_, x_fit, km.predict(x_dev), x_dev, 400),
            "perplexity_fit": perplexity_from_counts(counts_fit), "dead_codes_fit": int((counts_fit == 0).sum()),
            "perplexity_all": perplexity_from_counts(counts_all), "dead_codes_all": int((counts_all == 0).sum()),
            "fit_s": round(wall, 1), "fit_cpu_s": round(cpu, 1)}


def table(results: list[dict]) -> str:
    import numpy as np

    def cell(rows, key, fmt):
        vals = [r[key] for r in rows if key in r]
        if not vals:
            return "–"
        text = fmt.format(float(np.mean(vals)))
        if len(vals) > 1 and key.endswith("r2"):
            text += f" ({fmt.format(min(vals))}–{fmt.format(max(vals))})"
        return text

    lines = ["| variant | seeds | dev R² (raw) | dev R² of concept means | perplexity fit / all | dead fit / all | "
             "σ(P) min–max | ‖z‖²/d (states) | commit first → last | re-seeded | fit s (CPU s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in [*VARIANTS, "kmeans"]:
        rows = sorted((r for r in results if r["variant"] == name), key=lambda r: r["seed"])
        if not rows:
            continue
        seeds = ",".join(str(r["seed"]) for r in rows)
        if name == "kmeans":
            c = lambda key, fmt: cell(rows, key, fmt)  # noqa: E731
            lines.append(f"| kmeans (n_init=1) | {seeds} | – | {c('dev_centroid_r2', '{:.4f}')} | "
                         f"{c('perplexity_fit', '{:.1f}')} / {c('perplexity_all', '{:.1f}')} | "
                         f"{c('dead_codes_fit', '{:.0f}')} / {c('dead_codes_all', '{:.0f}')} | – | – | – | – | "
                         f"{c('fit_s', '{:.0f}')} ({c('fit_cpu_s', '{:.0f}')}) |")
            continue
        c = lambda key, fmt: cell(rows, key, fmt)  # noqa: E731
        lines.append(f"| {name} | {seeds} | {c('dev_r2', '{:.4f}')} | {c('dev_centroid_r2', '{:.4f}')} | "
                     f"{c('perplexity_fit', '{:.1f}')} / {c('perplexity_all', '{:.1f}')} | "
                     f"{c('dead_codes_fit', '{:.0f}')} / {c('dead_codes_all', '{:.0f}')} | "
                     f"{c('p_sv_min', '{:.3f}')}–{c('p_sv_max', '{:.3f}')} | "
                     f"{c('z_sq_per_dim', '{:.2f}')} ({c('h_sq_per_dim', '{:.2f}')}) | "
                     f"{c('commit_first', '{:.3f}')} → {c('commit_last', '{:.3f}')} | {c('reseeded', '{:.0f}')} | "
                     f"{c('fit_s', '{:.0f}')} ({c('fit_cpu_s', '{:.0f}')}) |")
    notes = ["", "Default store (MiniLM layer 5, `cache/runs/refactor`), K = 400, default epochs (26 over the "
             "10,000-row fit set). R² columns: mean over the seeds (min–max). Dev R² (raw): decoder "
             "reconstruction of the dev rows in the model's raw space. Dev R² of concept means: each dev row "
             "replaced by the mean fit-row state of its concept (what ablation removes). σ(P): singular values "
             "of the encoder's projection. ‖z‖²/d: mean over fit rows, against the normalised states' "
             "‖h‖²/d. "
             "Commit: commitment loss of the first and last epoch. Fit s: wall time on a shared 2-core "
             "machine; CPU s is the steadier figure."]
    return "\n".join(lines + notes) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS),
                    help="VQLC variants to fit (none: only the K-Means row)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--no-kmeans", action="store_true", help="skip the K-Means reference row")
    a = ap.parse_args()
    import numpy as np
    import torch

    from vqlc_core.data.store import ActivationStore

    torch.set_num_threads(1)
    store = ActivationStore(STORE / "store")
    fit, dev = np.load(STORE / "fitset.npy"), store.rows_where(split="dev")
    x_fit, x_dev = store.read(fit), store.read(dev)
    out = RESULTS / "vqlc_fidelity.json"
    results = json.loads(out.read_text()) if out.exists() else []
    fresh = []
    for seed in a.seeds:
        if not a.no_kmeans:
            fresh.append(measure_kmeans(seed, store, x_fit, x_dev))
            print(json.dumps(fresh[-1]), flush=True)
        for name in a.variants:
            fresh.append(measure_vqlc(name, seed, store, fit, dev, x_fit, x_dev))
            print(json.dumps({k: v for k, v in fresh[-1].items() if not k.endswith("by_epoch")}), flush=True)
    done = {(r["variant"], r["seed"]) for r in fresh}
    results = [r for r in results if (r["variant"], r["seed"]) not in done] + fresh
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(out, results, indent=2)
    md = table(results)
    (RESULTS / "vqlc_fidelity.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
