"""The evaluation stage's measures: per method, codebook use, purity, fit cost, and how the
test split's prediction representations fall into concepts; and the faithfulness table.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from vqlc_core.base import distributed
from vqlc_core.base.runio import read_json, read_parquet, write_json, write_parquet
from vqlc_core.evaluate import shards
from vqlc_core.evaluate.faithfulness import (PREDICTION, faithfulness, matched_differences, paired_differences,
                                              summarize_faithfulness)
from vqlc_core.evaluate.instrument import EVERY, fit_probe, instrument, instrument_differences
from vqlc_core.methods.concepts import train_mask
from vqlc_core.methods.metrics import assignment_ami, centroid_r2, codebook_perplexity, dead_codes


def prediction_concepts(cs, tokens, split: str = "test") -> dict:
    """How the prediction representations of `split` fall into concepts: how many distinct
    concepts they use, those concepts' class purity (true labels of their train members) weighted
    by the split's prediction rows, the largest concept's share of them, and the share that falls
    into a concept whose train members are mostly prediction rows."""
    rows = np.flatnonzero(((tokens["kind"] == "pred") & (tokens["split"] == split)).to_numpy())
    if len(rows) == 0:
        return {"distinct": 0, "purity": float("nan"), "largest_share": float("nan"), "n": 0,
                "mostly_predictions": float("nan")}
    ids, counts = np.unique(np.asarray(cs.assignments)[rows], return_counts=True)
    summary = cs.summary.set_index("concept").loc[ids]
    purity = summary["purity"].to_numpy()
    mostly = (summary["n_pred"].to_numpy() * 2 > summary["size"].to_numpy())
    return {"distinct": int(len(ids)), "purity": float(np.average(purity, weights=counts)),
            "largest_share": float(counts.max() / len(rows)), "n": int(len(rows)),
            "mostly_predictions": float(counts[mostly].sum() / len(rows))}


def method_measures(run, method, cs) -> dict:
    """Codebook use (on all rows, the fit set and the dev rows), purity, size quantiles,
    reconstruction R² of the dev rows by their concept vector, fit cost, and the test split's
    prediction concepts, for one fitted method."""
    store = run.store
    sizes = cs.summary["size"].to_numpy()
    a = cs.assignments
    dev = store.rows_where(split="dev")
    out = {"perplexity": float(codebook_perplexity(a, cs.n_concepts)), "dead_codes": int(dead_codes(a, cs.n_concepts)),
           "mean_purity": float(np.average(cs.summary["purity"], weights=np.maximum(sizes, 1e-9))),
           "size_quantiles": np.quantile(sizes, [0, 0.25, 0.5, 0.75, 1]).tolist(), **cs.info}
    fitset = np.load(run.dir / "fitset.npy")
    out.update({f"fitset_{k}": v for k, v in method.score_store(store, fitset).items()})
    out.update({f"dev_{k}": v for k, v in method.score_store(store, dev).items()})
    out["dev_centroid_r2"] = float(centroid_r2(store, dev, a, cs.vectors))
    out.update({f"test_prediction_{k}": v for k, v in prediction_concepts(cs, store.tokens).items()})
    if run.tags is not None and "predicted" in run.tags.columns:
        out["test_prediction_predicted_purity"] = predicted_purity(cs, store.tokens, run.tags["predicted"])
    return out


def predicted_purity(cs, tokens, predicted, split: str = "test") -> float:
    """How the prediction representations of `split` fall into concepts, by what the model
    predicted: per concept, the share of its train prediction rows of its most common predicted
    class, weighted by the split's prediction rows in it (`prediction_concepts` gives the purity by
    true labels, which the model's own errors on train texts bound)."""
    kind, part = tokens["kind"].to_numpy(), tokens["split"].to_numpy()
    a, pred = np.asarray(cs.assignments), np.asarray(predicted.astype(str))
    rows = np.flatnonzero((kind == "pred") & (part == split))
    train = np.flatnonzero((kind == "pred") & (part == "train"))
    if len(rows) == 0 or len(train) == 0:
        return float("nan")
    table = pd.crosstab(a[train], pred[train])
    share = (table.max(1) / table.sum(1)).reindex(np.unique(a[rows])).fillna(0.0)
    ids, counts = np.unique(a[rows], return_counts=True)
    return float(np.average(share.loc[ids].to_numpy(), weights=counts))


def seed_agreement(run, method: str) -> dict:
    """Mean and range of the pairwise AMI between the assignments of all rows under each pair
    of the build's seeds (none with one seed)."""
    seeds = run.cfg.method_seeds
    if len(seeds) < 2:
        return {}
    a = {s: run.concept_set(method, s).assignments for s in seeds}
    amis = [assignment_ami(a[x], a[y]) for x, y in combinations(seeds, 2)]
    return {"seed_ami_mean": float(np.mean(amis)), "seed_ami_min": float(np.min(amis)),
            "seed_ami_max": float(np.max(amis)), "seeds": list(seeds)}


def completeness_summary(errors, steps: int, baseline_proba=(), baseline: str = "") -> dict:
    """Integrated Gradients over the faithfulness sentences: the completeness error's mean, 95th
    percentile and maximum (|sum of attributions - (f(x) - f(baseline))| / |f(x) - f(baseline)|),
    and what the classifier predicts from the baseline: its mean class probabilities, and its
    mean probability of the sentence's predicted class per predicted class
    (`baseline_proba`: (predicted class, probabilities) per sentence)."""
    e = np.asarray(errors, dtype=np.float64)
    e = e[np.isfinite(e)]
    if len(e) == 0:
        return {"steps": steps, "n": 0}
    out = {"steps": steps, "n": int(len(e)), "baseline": baseline, "completeness_error_mean": float(e.mean()),
           "completeness_error_p95": float(np.quantile(e, 0.95)), "completeness_error_max": float(e.max())}
    if len(baseline_proba):
        pred = np.asarray([p for p, _ in baseline_proba])
        proba = np.asarray([q for _, q in baseline_proba])
        out["baseline_proba_mean"] = proba.mean(0).tolist()
        out["baseline_proba_of_predicted"] = {int(c): float(proba[pred == c, c].mean()) for c in np.unique(pred)}
    return out


def faithfulness_sentences(texts, n: int, seed: int = 0) -> list[str]:
    """The test split's texts for the faithfulness table: all of them, or a seeded sample of n in
    text order. (The first n would do for a shuffled corpus, but MR lists one class first: its
    first 200 test sentences are all positive.)"""
    test = texts[texts["split"] == "test"]["text"]
    return test.iloc[_faithfulness_pick(len(test), n, seed)].tolist()


def faithfulness_text_ids(texts, n: int, seed: int = 0) -> list[int]:
    """The text ids of `faithfulness_sentences`, in the same order (its rows' `text_index`)."""
    test = texts[texts["split"] == "test"]["text_id"]
    return test.iloc[_faithfulness_pick(len(test), n, seed)].tolist()


def _faithfulness_pick(n_test: int, n: int, seed: int) -> np.ndarray:
    """Positions among the test texts: all of them, or a seeded sample of n in text order."""
    if n >= n_test:
        return np.arange(n_test)
    return np.sort(np.random.default_rng(seed).choice(n_test, size=n, replace=False))


def concept_faithfulness(run, method: str) -> pd.Series:
    """Per concept of `method` (shown seed): the mean confidence drop of the faithfulness rows
    where it was the sentence's prediction concept (the concept the store gives the sentence's
    prediction row); NaN for a concept that is no test sentence's prediction concept."""
    cs = run.concept_set(method)
    rows = read_parquet(run.dir / "eval" / "faithfulness_rows.parquet")
    rows = rows[(rows["method"] == method) & (rows["target"] == PREDICTION)
                & (rows["seed"] == run.cfg.method_seeds[0])]
    ids = np.asarray(faithfulness_text_ids(run.texts, run.cfg.eval.faithfulness_texts, run.cfg.seed))
    tok = run.store.tokens
    pred_row = pd.Series(np.flatnonzero((tok["kind"] == "pred").to_numpy()),
                         index=tok.loc[tok["kind"] == "pred", "text_id"].to_numpy())
    concept = cs.assignments[pred_row.reindex(ids[rows["text_index"].to_numpy()]).to_numpy()]
    return pd.Series(rows["conf_drop"].to_numpy(), index=concept).groupby(level=0).mean() \
        .reindex(range(cs.n_concepts))


def train_covariance(store, n: int = 20000, seed: int = 0) -> np.ndarray:
    """(d, d) covariance of the store's train rows (a seeded sample of at most n of them): the
    distribution the energy-matched random directions are drawn from."""
    train = np.flatnonzero(train_mask(store.tokens, store.n_rows))
    pick = np.sort(np.random.default_rng(seed).choice(train, size=min(n, len(train)), replace=False))
    x = store.read(pick).astype(np.float64)
    return np.cov(x, rowvar=False)


def prediction_class_means(store, predicted: np.ndarray) -> np.ndarray:
    """(C, d) mean state of the store's train prediction rows whose text the model gave class c
    (`predicted`: each text's predicted class, in text order); NaN rows for a class never
    predicted on train. The class direction of the faithfulness table is this row centred."""
    tokens = store.tokens
    rows = np.flatnonzero(((tokens["split"] == "train") & (tokens["kind"] == "pred")).to_numpy())
    predicted = np.asarray(predicted, dtype=np.int64)
    cls = predicted[tokens["text_id"].to_numpy()[rows]]
    n_classes = int(predicted.max()) + 1 if len(predicted) else 0
    sums, counts = np.zeros((n_classes, store.dim)), np.bincount(cls, minlength=n_classes).astype(np.float64)
    start = 0
    for x in store.iter_batches(16384, shuffle=False, rows=rows):  # ascending rows, as `rows` is
        np.add.at(sums, cls[start : start + len(x)], x.double().numpy())
        start += len(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts[:, None]


def evaluate(run, predicted: np.ndarray | None = None) -> dict:
    """Write eval/measures.json, the per-sentence faithfulness rows of every method and seed
    (eval/faithfulness_rows.parquet), their summary with 95% intervals (eval/faithfulness.parquet),
    per predicted class (eval/faithfulness_by_class.parquet), each target against its
    energy-matched controls (eval/matched.parquet, eval/matched_by_class.parquet) and the paired
    differences between VQLC and each other method (eval/paired.parquet); with
    `instrument_texts`, the instruments' rows on a seeded sample of those sentences
    (eval/instrument_rows.parquet) and their differences from their controls
    (eval/instrument.parquet, eval/instrument_by_class.parquet). The instruments cut at every
    position only: on decoder-frozen the cut at the pooled position alone gave the same
    differences within 0.01 (bench/results/instrument_decoder-frozen.md). With `predicted` (each
    text's predicted class, in text order) the prediction concept is also compared with the class
    direction (`prediction_class_means`)."""
    cfg = run.cfg
    built = run.methods_built()
    texts = run.texts
    test = faithfulness_sentences(texts, cfg.eval.faithfulness_texts, cfg.seed)
    mine = shards.share(test)  # under torchrun this rank's sentences, the others None
    cov = train_covariance(run.store, seed=cfg.seed)
    class_means = prediction_class_means(run.store, predicted) if predicted is not None else None
    measures, parts, instrumented = {}, [], []
    n_instrument = min(cfg.eval.instrument_texts, len(test))
    probe = fit_probe(run.store, seed=cfg.seed) if n_instrument else None
    # a seeded sample of the faithfulness sentences (theirs are in text order, one class first on
    # MR); the others are passed as None, so each row's text_index is the faithfulness table's
    chosen = set(np.random.default_rng(cfg.seed).choice(len(test), n_instrument, replace=False).tolist())
    instrument_texts = [t if i in chosen else None for i, t in enumerate(mine)]
    for i, seed in enumerate(cfg.method_seeds):
        methods = {m: (run.method(m, seed), run.concept_set(m, seed)) for m in built}
        explainer = run.explainer(methods)
        rows = faithfulness(explainer, mine, seed=seed, cov=cov, class_means=class_means, progress=distributed.is_main())
        if i == 0:
            attrs, baseline_name = dict(rows.attrs), explainer.ig_baseline_name
            if distributed.is_main():
                measures = {m: method_measures(run, method, cs) for m, (method, cs) in methods.items()}
        # the summaries run without the attrs (every sentence's IG facts), which pandas would deep-copy
        # into each of the thousands of frames derived from them (17 s of a 94 s profile): kept above
        parts.append(shards.plain(rows).assign(seed=seed))
        if n_instrument:
            instrumented.append(instrument(explainer, instrument_texts, probe, seed=seed, cov=cov, positions=(EVERY,),
                                           progress=distributed.is_main()).assign(seed=seed))
    eval_dir = run.dir / "eval"
    got = shards.gather(eval_dir, "faithfulness_rows", pd.concat(parts, ignore_index=True), attrs)
    got_ins = shards.gather(eval_dir, "instrument_rows", pd.concat(instrumented, ignore_index=True)) if instrumented else []
    shards.clean(eval_dir)
    if not distributed.is_main():
        return {}
    rows = shards.sorted_rows(pd.concat([f for f, _ in got], ignore_index=True), built, list(cfg.method_seeds))
    # pandas deep-copies a frame's attrs (every sentence's IG facts) into each frame derived from
    # it, thousands of times in the summaries: they run without, and the rows file keeps them
    attrs = {"seconds": max(a.get("seconds", 0.0) for _, a in got),
             "ig_completeness": [e for _, a in got for e in a.get("ig_completeness", [])],
             "ig_baseline_proba": [p for _, a in got for p in a.get("ig_baseline_proba", [])]}
    ig = completeness_summary(attrs["ig_completeness"], cfg.eval.ig_steps, attrs["ig_baseline_proba"], baseline_name)
    instrumented = [shards.by_sentence(pd.concat([f for f, _ in got_ins], ignore_index=True), list(cfg.method_seeds))
                    ] if got_ins else []
    for m in built:
        measures[m].update(seed_agreement(run, m))
    table = summarize_faithfulness(rows, seed=cfg.seed)
    by_class = summarize_faithfulness(rows, seed=cfg.seed, by_class=True)
    matched = matched_differences(rows, seed=cfg.seed)
    matched_by_class = matched_differences(rows, seed=cfg.seed, by_class=True)
    paired = pd.concat([paired_differences(rows, "vqlc", other, seed=cfg.seed) for other in built
                        if other != "vqlc" and "vqlc" in built] or [pd.DataFrame()], ignore_index=True)
    acc = read_json(run.dir / "classifier" / "metrics.json")["accuracy"]
    rows.attrs = attrs
    write_parquet(run.dir / "eval" / "faithfulness_rows.parquet", rows)
    write_parquet(run.dir / "eval" / "faithfulness.parquet", table)
    write_parquet(run.dir / "eval" / "paired.parquet", paired)
    write_parquet(run.dir / "eval" / "faithfulness_by_class.parquet", by_class)
    write_parquet(run.dir / "eval" / "matched.parquet", matched)
    write_parquet(run.dir / "eval" / "matched_by_class.parquet", matched_by_class)
    if instrumented:
        ins = pd.concat(instrumented, ignore_index=True)
        write_parquet(run.dir / "eval" / "instrument_rows.parquet", ins)
        write_parquet(run.dir / "eval" / "instrument.parquet", instrument_differences(ins, seed=cfg.seed))
        write_parquet(run.dir / "eval" / "instrument_by_class.parquet",
                      instrument_differences(ins, seed=cfg.seed, by_class=True))
    write_json(run.dir / "eval" / "measures.json", {"methods": measures, "classifier_accuracy": acc,
                                                    "seeds": list(cfg.method_seeds), "n_test_texts": len(test),
                                                    "integrated_gradients": ig})
    return {"n_texts": len(test), "seeds": list(cfg.method_seeds), "n_instrument_texts": n_instrument}
