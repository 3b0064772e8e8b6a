"""Concept attribution on built runs, local against global intervention: per method, over seeded
faithfulness test sentences, for each intervention (local: a concept removed at its words' tokens;
global: at every position, as the faithfulness tables):

- flips: the share of sentences where removing one concept alone changes the predicted class;
- Σ singles / joint (median over sentences whose joint drop is at least 0.01) and the
  interaction share;
- deletion AOPC under each intervention for the local order, the global order and a random order;
- on polarity runs, agreement with an independent sentiment lexicon (VADER's, shipped by the
  `vadersentiment` wheel; an instrument only, never part of an explanation): where a strong word
  (|valence| >= 1.5) agrees with the prediction, whether the strongest such word's concept is in
  the top 3 (against the expected share of a random order), and the share of strong words of the
  opposite sign whose concept is listed as supporting the prediction (score > 0.02);
- Shapley values: 32 antithetic orders against exact Shapley on sentences of 4 to 10 concepts
  (mean absolute error), and how often the Shapley top concept is the single-removal one.
Every figure has a 95% bootstrap interval over sentences. Optionally the latency of one 40-word
explanation. Writes bench/results/attribution_<run>.json per run and docs/results/attribution.md
from every stored one (this script alone writes that page).

Usage: python bench/attribution.py --runs default decoder [--n 200] [--latency]
       python bench/attribution.py --page     (the page from the stored results only)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
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


def explain_latency(ex, run, n: int = 20) -> dict:
    """p50 and p95 (ms) of `n` explanations of 40 words as the Explain page asks for them (the
    attribution of VQLC alone, local), the cache cleared before each; without and with Shapley."""
    from vqlc_core.evaluate.evaluation import faithfulness_sentences

    method = "vqlc" if "vqlc" in ex.methods else next(iter(ex.methods))
    out = {}
    for shap in (False, True):
        lat = []
        for t in faithfulness_sentences(run.texts, 3 * n, 1)[:n]:
            ex._cache.clear()
            s = time.perf_counter()
            ex.explain(" ".join(((t + " ") * 3).split()[:40]), attribute=[method], shapley=shap)
            lat.append(time.perf_counter() - s)
        out["shapley" if shap else "single"] = {"p50": round(1000 * float(np.median(lat)), 1),
                                                "p95": round(1000 * float(np.percentile(lat, 95)), 1), "n": len(lat)}
    return out


STRONG = 1.5  # |valence| of a strong lexicon word
SUPPORT = 0.02  # a score above which a concept is listed as supporting the prediction


def lexicon() -> dict[str, float]:
    """VADER's word valences (an instrument: never part of an explanation)."""
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return dict(SentimentIntensityAnalyzer().lexicon)


def curve(ex, p, m: str, order: list[int], word_ids, how: str, pred: int) -> np.ndarray:
    """p(predicted class) as the top-1, top-2, ... concepts of `order` are removed under `how`."""
    from vqlc_core.explain.contributions import Removal, removal_proba

    rem = Removal(ex, p, m, word_ids, how)
    return removal_proba(ex, [rem] * len(order), [order[: k + 1] for k in range(len(order))])[:, pred]


def shapley_error(ex, p, m: str, word_ids, e) -> tuple[float, bool] | None:
    """Mean absolute error of 32 antithetic orders against exact Shapley, and whether the top
    concepts of Shapley and of single removals agree, on one sentence of 4..10 concepts."""
    from vqlc_core.explain import shapley as shap
    from vqlc_core.explain.contributions import Removal, removal_proba

    present = list(dict.fromkeys(word_ids))
    if not 4 <= len(present) <= shap.EXACT_MAX:
        return None
    rem = Removal(ex, p, m, word_ids, "local")
    coal = shap.all_coalitions(len(present))
    pr = removal_proba(ex, [rem] * len(coal), [[present[i] for i in c] for c in coal])[:, e.predicted_index]
    value = {c: e.confidence - float(x) for c, x in zip(coal, pr)}
    exact = shap.exact_shapley(len(present), value)
    est, _ = shap.sampled_shapley(len(present), shap.antithetic_orders(len(present), shap.PERMUTATIONS, 0), value)
    singles = np.array([value[(i,)] for i in range(len(present))])
    return float(np.abs(est - exact).mean()), bool(np.argmax(exact) == np.argmax(singles))


def measure(name: str, n: int, latency: bool) -> dict:
    """The attribution's checks on run `name` over `n` seeded faithfulness sentences."""
    import torch

    import vqlc_core as vq
    from vqlc_core.evaluate.evaluation import faithfulness_sentences
    from vqlc_core.explain.contributions import aopc

    torch.set_num_threads(1)
    run = vq.open_run(name)
    ex = run.explainer({m: (run.method(m), run.concept_set(m)) for m in run.methods_built()})
    texts = faithfulness_sentences(run.texts, n, run.cfg.seed)
    names = [c.lower() for c in run.class_names]
    polarity = sorted(names) == ["negative", "positive"]
    lex = lexicon() if polarity else {}
    rows = {m: [] for m in ex.methods}
    t0 = time.perf_counter()
    for i, t in enumerate(texts):
        got = {how: ex.explain(t, intervention=how) for how in ("local", "global")}
        p = ex._pass(t)
        for m in ex.methods:
            loc, glo = got["local"].methods[m], got["global"].methods[m]
            e = got["local"]
            pred, p0 = e.predicted_index, e.confidence
            ids = [r.concept for r in loc.contributions]
            rng = np.random.default_rng([run.cfg.seed, i])
            rand = list(rng.permutation(ids))
            orders = {"local": ids, "global": [r.concept for r in glo.contributions], "random": rand}
            row = {}
            for how, me in (("local", loc), ("global", glo)):
                sc = np.array([r.score for r in me.contributions])
                row[f"{how}_flip"] = float(any(r.ablated_prediction != e.prediction for r in me.contributions))
                row[f"{how}_ratio"] = float(sc.sum() / me.joint) if abs(me.joint) >= 0.01 else np.nan
                row[f"{how}_interaction"] = me.interaction
                for o, order in orders.items():
                    c = me.deletion if o == how else curve(ex, p, m, order, loc.word_concepts, how, pred)
                    row[f"{how}_aopc_{o}"] = aopc(p0, c)
                if polarity:
                    sign = 1 if names[pred] == "positive" else -1
                    top3 = {r.concept for r in me.contributions[:3]}
                    score = {r.concept: r.score for r in me.contributions}
                    val = [lex.get(w.word.lower(), 0.0) for w in e.words]
                    agree = [j for j, v in enumerate(val) if abs(v) >= STRONG and np.sign(v) == sign]
                    if agree:
                        j = max(agree, key=lambda j: abs(val[j]))
                        row[f"{how}_lex_top3"] = float(loc.word_concepts[j] in top3)
                        row["lex_top3_random"] = min(3, len(ids)) / len(ids)
                        hits = {loc.word_concepts[j] for j in agree}
                        row[f"{how}_lex_any_top3"] = float(bool(hits & top3))
                        row["lex_any_top3_random"] = 1 - math.comb(len(ids) - len(hits), min(3, len(ids))) / math.comb(
                            len(ids), min(3, len(ids)))
                    opposite = [j for j, v in enumerate(val) if abs(v) >= STRONG and np.sign(v) == -sign]
                    row[f"{how}_lex_opposite"] = [float(score[loc.word_concepts[j]] > SUPPORT) for j in opposite]
            if i < 40:
                se = shapley_error(ex, p, m, loc.word_concepts, e)
                if se is not None:
                    row["shapley_mae"], row["shapley_same_top"] = se
            rows[m].append(row)
    out = {"run": name, "n": len(texts), "seconds": round(time.perf_counter() - t0, 1), "polarity": polarity,
           "methods": {}}
    for m, r in rows.items():
        get = lambda k: [x[k] for x in r if k in x]  # noqa: E731
        res = {}
        for how in ("local", "global"):
            res[how] = {"flip_share": boot(get(f"{how}_flip"), np.mean),
                        "singles_over_joint_median": boot(get(f"{how}_ratio")),
                        "interaction_median": boot(get(f"{how}_interaction")),
                        **{f"aopc_{o}": boot(get(f"{how}_aopc_{o}"), np.mean) for o in ("local", "global", "random")},
                        "aopc_local_minus_global": boot(np.subtract(get(f"{how}_aopc_local"),
                                                                    get(f"{how}_aopc_global")), np.mean),
                        "aopc_minus_random": boot(np.subtract(get(f"{how}_aopc_{how}"),
                                                              get(f"{how}_aopc_random")), np.mean)}
            if polarity:
                res[how]["lexicon_top3"] = boot(get(f"{how}_lex_top3"), np.mean)
                res[how]["lexicon_any_top3"] = boot(get(f"{how}_lex_any_top3"), np.mean)
                res[how]["lexicon_opposite_supporting"] = boot([v for x in get(f"{how}_lex_opposite") for v in x],
                                                               np.mean)
                res[how]["n_lexicon_sentences"] = len(get(f"{how}_lex_top3"))
        if polarity:
            res["lexicon_top3_random"] = boot(get("lex_top3_random"), np.mean)
            res["lexicon_any_top3_random"] = boot(get("lex_any_top3_random"), np.mean)
            res["lexicon_top3_local_minus_global"] = boot(np.subtract(get("local_lex_top3"), get("global_lex_top3")),
                                                          np.mean)
        if get("shapley_mae"):
            res["shapley"] = {"mae": boot(get("shapley_mae"), np.mean), "same_top": boot(get("shapley_same_top"), np.mean),
                              "n": len(get("shapley_mae"))}
        out["methods"][m] = res
    if latency:
        out["latency_ms"] = explain_latency(ex, run)
    return out


def favours(got: dict) -> str:
    """Which figures of one run favour which intervention, per measure and method: 'local' or 'global'
    where the two 95% intervals do not overlap (or, for the orders, where the paired difference's
    interval excludes 0), else 'neither'."""
    def side(lo: list[float], gl: list[float], better: str) -> str:
        if better == "one":  # closer to 1: the intervals of the distance from 1
            dist = lambda v: [0.0, 0.0 if v[1] <= 1 <= v[2] else min(abs(1 - v[1]), abs(1 - v[2])),  # noqa: E731
                              max(abs(1 - v[1]), abs(1 - v[2]))]
            lo, gl, better = dist(lo), dist(gl), "lower"
        if better == "lower":
            return "local" if lo[2] < gl[1] else "global" if gl[2] < lo[1] else "neither"
        return "local" if lo[1] > gl[2] else "global" if gl[1] > lo[2] else "neither"

    measures = [("one concept flips (fewer)", "flip_share", "lower"), ("Σ singles / joint (closer to 1)",
                "singles_over_joint_median", "one"), ("interaction share (lower)", "interaction_median", "lower")]
    if got["polarity"]:
        measures += [("strongest lexicon word's concept in top 3", "lexicon_top3", "higher"),
                     ("any agreeing lexicon word's concept in top 3", "lexicon_any_top3", "higher"),
                     ("opposite-sign word listed as supporting (fewer)", "lexicon_opposite_supporting", "lower")]
    parts = []
    for label, key, better in measures:
        sides = {NAMES.get(m, m): side(r["local"][key], r["global"][key], better) for m, r in got["methods"].items()
                 if key in r["local"] and key in r["global"]}
        if key == "lexicon_top3":  # paired over the same sentences: the difference's interval
            sides = {NAMES.get(m, m): ("local" if d[1] > 0 else "global" if d[2] < 0 else "neither")
                     for m, r in got["methods"].items() for d in [r["lexicon_top3_local_minus_global"]]}
            label += " (paired)"
        parts.append(f"{label}: " + ", ".join(f"{m} {v}" for m, v in sides.items()))
    # deletion: within each intervention, does its own order beat the other one's (paired difference)?
    order = {}
    for m, r in got["methods"].items():
        d_loc, d_glo = r["local"]["aopc_local_minus_global"], r["global"]["aopc_local_minus_global"]
        own_loc = "local order" if d_loc[1] > 0 else "global order" if d_loc[2] < 0 else "neither"
        own_glo = "global order" if d_glo[2] < 0 else "local order" if d_glo[1] > 0 else "neither"
        order[NAMES.get(m, m)] = f"{own_loc} under local, {own_glo} under global"
    parts.append("deletion AOPC, the better order (paired): " + ", ".join(f"{m} {v}" for m, v in order.items()))
    return "Which intervention each figure favours (95% intervals apart): " + "; ".join(parts) + "."


def page() -> str:
    """docs/results/attribution.md from every stored bench/results/attribution_<run>.json."""
    f = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"  # noqa: E731
    pc = lambda v: f"{100 * v[0]:.0f}% [{100 * v[1]:.0f}, {100 * v[2]:.0f}]"  # noqa: E731
    lines = ["# Concept attribution of a prediction", "",
             "Written by `bench/attribution.py` from its stored results. A concept's score is the drop in p(predicted "
             "class) when the concept is removed, under one of two interventions: **local** (the explanation's: the "
             "concept's centred direction projected out only at the tokens of the input's words assigned to it) or "
             "**global** (projected out at every position, as the faithfulness tables do). The Explain page, its "
             "toggles and `Explainer.explain` use the local one unless asked otherwise.", "",
             "- *one concept flips*: share of sentences where removing a single concept changes the predicted class.",
             "- *Σ singles / joint*: the sum of the single scores over the drop with all of the input's concepts "
             "removed together (median over sentences whose joint drop is at least 0.01); 1 when they add up.",
             "- *interaction share*: |joint − Σ singles| / (|joint| + Σ |singles|), median.",
             "- *AOPC*: mean over k of p0 − p_k as the top-k concepts of an order are removed together, under the "
             "column's intervention, for the local order, the global order and a seeded random order.",
             "- *lexicon*: VADER's lexicon (an instrument only): where a strong word (|valence| ≥ 1.5) agrees with "
             "the prediction, whether the strongest one's concept (or any such word's) is in the top 3 (random order: "
             "the expected share); "
             "and the share of strong opposite-sign words whose concept is listed as supporting (score > 0.02).",
             "- *Shapley*: 32 antithetic orders against exact Shapley values (sentences of 4 to 10 concepts among the "
             "first 40), local intervention.", "",
             "Means or medians with 95% bootstrap intervals over sentences; one concept set per method (the run's "
             "first seed).", ""]
    for path in sorted(RESULTS.glob("attribution_*.json")):
        got = json.loads(path.read_text())
        if "local" not in next(iter(got["methods"].values())):
            continue  # a result of the earlier, global-only bench
        prov = got.get("provenance", {})
        lines += [f"## `{got['run']}`", "",
                  f"`{prov.get('command', '?')}` at {prov.get('commit', '?')}, {prov.get('date', '?')}: {got['n']} "
                  f"sentences, {got['seconds']:.0f} s.", "",
                  "| method | intervention | one concept flips | Σ singles / joint | interaction share | AOPC, local order "
                  "| AOPC, global order | AOPC, random order |" + (" strongest lexicon word's concept in top 3 | any "
                                                                     "agreeing lexicon word's concept in top 3 | "
                                                                     "opposite-sign word listed as supporting |"
                                                                     if got["polarity"] else ""),
                  "|---|---|---|---|---|---|---|---|" + ("---|---|---|" if got["polarity"] else "")]
        for m, r in got["methods"].items():
            for how in ("local", "global"):
                x = r[how]
                lines.append(f"| {NAMES.get(m, m)} | {how} | {pc(x['flip_share'])} | {f(x['singles_over_joint_median'])} "
                             f"| {f(x['interaction_median'])} | {f(x['aopc_local'])} | {f(x['aopc_global'])} | "
                             f"{f(x['aopc_random'])} |" + (f" {pc(x['lexicon_top3'])} | {pc(x.get('lexicon_any_top3', [float('nan')] * 3))} | "
                                                           f"{pc(x['lexicon_opposite_supporting'])} |"
                                                           if got["polarity"] else ""))
        lines += ["", favours(got)]
        if got["polarity"]:
            lines += ["", "Lexicon, a random order (expected share in the top 3), strongest word and any word: " + ", ".join(
                f"{NAMES.get(m, m)} {pc(r['lexicon_top3_random'])} and {pc(r.get('lexicon_any_top3_random', [float('nan')] * 3))}"
                for m, r in got["methods"].items())
                + "; local minus global, paired: " + ", ".join(
                f"{NAMES.get(m, m)} {100 * r['lexicon_top3_local_minus_global'][0]:+.0f} points "
                f"[{100 * r['lexicon_top3_local_minus_global'][1]:+.0f}, {100 * r['lexicon_top3_local_minus_global'][2]:+.0f}]"
                for m, r in got["methods"].items()) + f" ({r['local']['n_lexicon_sentences']} sentences)."]
        shap = {m: r["shapley"] for m, r in got["methods"].items() if "shapley" in r}
        if shap:
            lines += ["", "Shapley, 32 antithetic orders against exact: " + ", ".join(
                f"{NAMES.get(m, m)} mean absolute error {f(v['mae'])}, same top concept as single removals "
                f"{pc(v['same_top'])} (n = {v['n']})" for m, v in shap.items()) + "."]
        if "latency_ms" in got:
            lat = got["latency_ms"]
            lines += ["", f"One 40-word explanation as the Explain page asks (VQLC's attribution, local, cache "
                      f"cleared): p50 {lat['single']['p50']:.0f} ms, p95 {lat['single']['p95']:.0f} ms; with Shapley "
                      f"values p50 {lat['shapley']['p50']:.0f} ms, p95 {lat['shapley']['p95']:.0f} ms (n = "
                      f"{lat['single']['n']})."]
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
