"""Concept attribution on a built run: per method, over seeded faithfulness test sentences, the
interaction share, AOPC of the deletion curve in attribution order against random order, the
within-sentence Spearman of IG-word-sum and attribution patching (AtP) scores against the exact
single ablation, and the latency of one explanation. Usage: python bench/attribution.py --n 40"""

import argparse
import time

import numpy as np
from scipy.stats import spearmanr

from vqlc_core.explain.contributions import aopc, patching_scores, removal_proba, word_order_scores
from vqlc_core.evaluate.evaluation import faithfulness_sentences
from vqlc_core.pipeline.run import Run


def boot(x, f=np.median, n=1000, seed=0):
    x = np.asarray([v for v in x if np.isfinite(v)])
    r = np.random.default_rng(seed).integers(0, len(x), (n, len(x)))
    return f(x), *np.percentile([f(x[i]) for i in r], [2.5, 97.5])


ap = argparse.ArgumentParser()
ap.add_argument("--run", default="default")
ap.add_argument("--n", type=int, default=40)
a = ap.parse_args()
run = Run(f"cache/runs/{a.run}")
ex = run.explainer({m: (run.method(m), run.concept_set(m)) for m in run.methods_built()})
texts = faithfulness_sentences(run.texts, a.n, run.cfg.seed)
rows = {m: [] for m in ex.methods}
t0 = time.perf_counter()
for i, t in enumerate(texts):
    e = ex.explain(t)
    p = ex._pass(t)
    for m, me in e.methods.items():
        recs = me.contributions
        ids = [r.concept for r in recs]
        sc = np.array([r.score for r in recs])
        rng = np.random.default_rng([run.cfg.seed, i])
        perms = [list(rng.permutation(ids)) for _ in range(3)]
        ig = word_order_scores(me.word_concepts, ids, e.attributions)
        ig_order = [ids[j] for j in np.argsort(-ig, kind="stable")]
        asks = [(0, m, o[: n + 1]) for o in perms + [ig_order] for n in range(len(o))]
        pr = removal_proba(ex, [p], asks)[:, e.predicted_index].reshape(4, len(ids))
        atp = patching_scores(ex, p, e.predicted_index, m, ids)
        ok = len(ids) >= 3
        rows[m].append({"interaction": me.interaction, "aopc": aopc(e.confidence, me.deletion),
                        "aopc_random": np.mean([aopc(e.confidence, c) for c in pr[:3]]),
                        "aopc_ig": aopc(e.confidence, pr[3]),
                        "rho_ig": spearmanr(ig, sc)[0] if ok else np.nan,
                        "rho_atp": spearmanr(atp, sc)[0] if ok else np.nan})
print(f"{len(texts)} sentences, {time.perf_counter() - t0:.0f} s")
for m, r in rows.items():
    get = lambda k: [x[k] for x in r]
    d_rand = np.subtract(get("aopc"), get("aopc_random"))
    d_ig = np.subtract(get("aopc"), get("aopc_ig"))
    f = lambda v: "%.3f [%.3f, %.3f]" % v
    print(f"| {m} | interaction (median) {f(boot(get('interaction')))} | rho IG-sum {f(boot(get('rho_ig')))} "
          f"| rho AtP {f(boot(get('rho_atp')))} | AOPC {np.mean(get('aopc')):.3f} | AOPC-random {f(boot(d_rand, np.mean))} "
          f"| AOPC-IG order {f(boot(d_ig, np.mean))} |")
lat = []
for t in faithfulness_sentences(run.texts, 60, 1)[:20]:
    long = (t + " ") * 3
    ex._cache.clear()
    s = time.perf_counter(); ex.explain(" ".join(long.split()[:40])); lat.append(time.perf_counter() - s)
print("explain 40 words: p50 %.0f ms, p95 %.0f ms (n=20)" % (1000 * np.median(lat), 1000 * np.percentile(lat, 95)))
