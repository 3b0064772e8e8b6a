"""Concept attribution on built runs: per method, over seeded faithfulness test sentences, the
interaction share of the exact single-concept ablations, AOPC of the deletion curve in attribution
order against random order and against the Integrated-Gradients word order, and the within-sentence
Spearman of IG-word-sum and attribution-patching (AtP) scores against the exact single ablation;
optionally the latency of one 40-word explanation. Writes bench/results/attribution_<run>.json per
run and docs/results/attribution.md from every stored one (this script alone writes that page).

Usage: python bench/attribution.py --runs default decoder [--n 200] [--latency]
       python bench/attribution.py --page     (the page from the stored results only)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

import numpy as np

from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "results" / "attribution.md"
NAMES = {"vqlc": "VQLC", "kmeans": "K-Means", "lacoat": "LACOAT", "sae": "SAE"}


def boot(x, f=np.median, n=1000, seed=0) -> list[float]:
    """f(x) with a 95% percentile-bootstrap interval over the finite values of x."""
    x = np.asarray([v for v in x if np.isfinite(v)])
    if len(x) == 0:
        return [float("nan")] * 3
    r = np.random.default_rng(seed).integers(0, len(x), (n, len(x)))
    return [float(f(x)), *map(float, np.percentile([f(x[i]) for i in r], [2.5, 97.5]))]


def explain_latency(ex, run) -> dict:
    """p50 and p95 of 20 explanations of 40 words (every method, the cache cleared before each)."""
    from vqlc_core.evaluate.evaluation import faithfulness_sentences

    lat = []
    for t in faithfulness_sentences(run.texts, 60, 1)[:20]:
        ex._cache.clear()
        s = time.perf_counter()
        ex.explain(" ".join(((t + " ") * 3).split()[:40]))
        lat.append(time.perf_counter() - s)
    return {"p50": round(1000 * float(np.median(lat)), 1), "p95": round(1000 * float(np.percentile(lat, 95)), 1),
            "n": len(lat)}


def measure(name: str, n: int, latency: bool) -> dict:
    """The attribution's checks on run `name` over `n` seeded faithfulness sentences."""
    import torch
    from scipy.stats import spearmanr

    import vqlc_core as vq
    from vqlc_core.evaluate.evaluation import faithfulness_sentences
    from vqlc_core.explain.contributions import aopc, patching_scores, removal_proba, word_order_scores

    torch.set_num_threads(1)
    run = vq.open_run(name)
    ex = run.explainer({m: (run.method(m), run.concept_set(m)) for m in run.methods_built()})
    texts = faithfulness_sentences(run.texts, n, run.cfg.seed)
    rows = {m: [] for m in ex.methods}
    t0 = time.perf_counter()
    for i, t in enumerate(texts):
        e = ex.explain(t)
        p = ex._pass(t)
        for m, me in e.methods.items():
            ids = [r.concept for r in me.contributions]
            sc = np.array([r.score for r in me.contributions])
            rng = np.random.default_rng([run.cfg.seed, i])
            perms = [list(rng.permutation(ids)) for _ in range(3)]
            ig = word_order_scores(me.word_concepts, ids, e.attributions)
            ig_order = [ids[j] for j in np.argsort(-ig, kind="stable")]
            asks = [(0, m, o[: k + 1]) for o in perms + [ig_order] for k in range(len(o))]
            pr = removal_proba(ex, [p], asks)[:, e.predicted_index].reshape(4, len(ids))
            atp = patching_scores(ex, p, e.predicted_index, m, ids)
            ok = len(ids) >= 3
            rows[m].append({"interaction": me.interaction, "aopc": aopc(e.confidence, me.deletion),
                            "aopc_random": float(np.mean([aopc(e.confidence, c) for c in pr[:3]])),
                            "aopc_ig": aopc(e.confidence, pr[3]),
                            "rho_ig": spearmanr(ig, sc)[0] if ok else np.nan,
                            "rho_atp": spearmanr(atp, sc)[0] if ok else np.nan})
    out = {"run": name, "n": len(texts), "seconds": round(time.perf_counter() - t0, 1), "methods": {}}
    for m, r in rows.items():
        get = lambda k: [x[k] for x in r]  # noqa: E731
        out["methods"][m] = {"interaction_median": boot(get("interaction")), "rho_ig_median": boot(get("rho_ig")),
                             "rho_atp_median": boot(get("rho_atp")), "aopc_mean": float(np.mean(get("aopc"))),
                             "aopc_minus_random": boot(np.subtract(get("aopc"), get("aopc_random")), np.mean),
                             "aopc_minus_ig": boot(np.subtract(get("aopc"), get("aopc_ig")), np.mean)}
    if latency:
        out["latency_ms"] = explain_latency(ex, run)
    return out


def page() -> str:
    """docs/results/attribution.md from every stored bench/results/attribution_<run>.json."""
    f = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"  # noqa: E731
    lines = ["# Concept attribution of a prediction", "",
             "Written by `bench/attribution.py` from its stored results. The score of a concept is its exact single "
             "ablation: p(predicted class) minus that probability with the concept's centred direction projected out of "
             "layer l at every position (what its Ablate toggle shows). Because it is an intervention, the check is the "
             "interaction share |joint - sum of singles| / (|joint| + sum of |singles|), joint being the drop with all "
             "of the input's concepts removed together. AOPC: mean over k of p0 - p_k as the top-k concepts are removed "
             "together; \"random\" is the mean of 3 seeded random orders, \"IG order\" ranks concepts by the sum of "
             "their words' Integrated-Gradients scores. Spearman is within a sentence (sentences with 3 or more "
             "concepts), against the exact single ablation. Medians (interaction, Spearman) or means (AOPC "
             "differences) with 95% bootstrap intervals over sentences.", ""]
    for path in sorted(RESULTS.glob("attribution_*.json")):
        got = json.loads(path.read_text())
        prov = got.get("checks_provenance", got.get("provenance", {}))
        lines += [f"## `{got['run']}`", "",
                  f"`{prov.get('command', '?')}` at {prov.get('commit', '?')}, {prov.get('date', '?')}, on "
                  f"{prov.get('machine', '?')}: {got['n']} sentences, {got['seconds']:.0f} s.", "",
                  "| method | interaction share (median) | Spearman IG-sum vs ablation | Spearman AtP vs ablation | AOPC | "
                  "AOPC minus random order | AOPC minus IG order |", "|---|---|---|---|---|---|---|"]
        for m, r in got["methods"].items():
            lines.append(f"| {NAMES.get(m, m)} | {f(r['interaction_median'])} | {f(r['rho_ig_median'])} | "
                         f"{f(r['rho_atp_median'])} | {r['aopc_mean']:.3f} | {f(r['aopc_minus_random'])} | "
                         f"{f(r['aopc_minus_ig'])} |")
        if "latency_ms" in got:
            lat = got["latency_ms"]
            when = got.get("provenance", {})
            lines += ["", f"One 40-word explanation with the attribution, three methods, cache cleared: p50 "
                      f"{lat['p50']:.0f} ms, p95 {lat['p95']:.0f} ms (n = {lat['n']}; `{when.get('command', '?')}` at "
                      f"{when.get('commit', '?')}, {when.get('date', '?')})."]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=["default"], help="built runs (default: default)")
    ap.add_argument("--n", type=int, default=200, help="seeded faithfulness test sentences per run (default: 200)")
    ap.add_argument("--latency", action="store_true", help="also time 20 explanations of 40 words (on a quiet machine)")
    ap.add_argument("--page", action="store_true", help="only write the page from the stored results")
    ap.add_argument("--latency-only", action="store_true", help="only time the explanations, added to each run's "
                    "stored results")
    args = ap.parse_args()
    if args.latency_only:
        import torch

        import vqlc_core as vq

        torch.set_num_threads(1)
        for name in args.runs:
            path = RESULTS / f"attribution_{name}.json"
            stored = json.loads(path.read_text())
            got = {k: v for k, v in stored.items() if k != "provenance"}
            got.setdefault("checks_provenance", stored.get("provenance", {}))  # what measured the checks
            run = vq.open_run(name)
            ex = run.explainer({m: (run.method(m), run.concept_set(m)) for m in run.methods_built()})
            got["latency_ms"] = explain_latency(ex, run)
            write_result(path, got)
            print(name, got["latency_ms"], flush=True)
    elif not args.page:
        for name in args.runs:
            got = measure(name, args.n, args.latency)
            write_result(RESULTS / f"attribution_{name}.json", got)
            print(json.dumps(got, indent=1), flush=True)
    PAGE.write_text(page())
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
