"""Prediction concepts made of predictions: which design, measured side by side. (Issue "The
concept behind a prediction, readable and still faithful".)

On a built run (its store, fit set and classifier), every method is fitted per seed as the build
fits it with `--prediction-concepts KP` for every KP asked: 0 is one set of K concepts for every
row (the paper's), KP > 0 fits the method again on the train prediction rows alone with KP
concepts (`methods/split.py`; the word concepts are the same fit for every KP > 0). Per (method,
KP), over seeds: the share of test predictions whose concept's train members are mostly
prediction rows, those concepts' purity (true labels), distinct concepts and the largest one's
share; the share of test sentences whose prediction concept's name holds a content word
(`naming.content_words`) and the distinct names; the calibration of the number shown (ECE on dev
before and after tempering); and the prediction concept's confidence drop minus its
energy-matched other concept and minus an energy-matched N(0, Σ) direction, with 95% crossed
bootstrap intervals (sentences and seeds).

Usage: python bench/prediction_concepts.py --run default [--kp 0 10 20 40 80] [--seeds 0 1 2]
       [--methods vqlc kmeans lacoat] [--texts 200]
Writes bench/results/prediction_concepts_<run>.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # a shared machine: one thread for every library

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def name_measures(run, cs) -> dict:
    """Over the test split's prediction rows: the share whose concept's name holds a content word,
    and how many distinct names they get."""
    import numpy as np

    from vqlc_core.methods.naming import content_words

    tok = run.store.tokens
    rows = np.flatnonzero(((tok["kind"] == "pred") & (tok["split"] == "test")).to_numpy())
    labels = [cs.label(int(k)) for k in cs.assignments[rows]]
    return {"content_word_share": float(np.mean([bool(content_words(x, run.class_names)) for x in labels])),
            "distinct_names": len(set(labels))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="a built run under cache/runs (default: default)")
    ap.add_argument("--kp", nargs="+", type=int, default=[0, 10, 20, 40, 80],
                    help="prediction concepts to try; 0 is one set for every row (default: 0 10 20 40 80)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    ap.add_argument("--methods", nargs="+", default=["vqlc", "kmeans", "lacoat"], help="methods (default: all three)")
    ap.add_argument("--texts", type=int, default=200, help="test sentences per faithfulness pass (default: 200)")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    torch.set_num_threads(1)
    from vqlc_core.pipeline.run import Run
    from vqlc_core.pipeline.stage_runs import concept_set_of
    from vqlc_core.evaluate.evaluation import faithfulness_sentences, prediction_concepts, train_covariance
    from vqlc_core.evaluate.faithfulness import MATCHED, PREDICTION, faithfulness, matched_differences
    from vqlc_core.methods.split import SplitConcepts, build_method

    run = Run(ROOT / "cache" / "runs" / args.run)
    rows = np.load(run.dir / "fitset.npy")
    texts = faithfulness_sentences(run.texts, args.texts, run.cfg.seed)
    cov = train_covariance(run.store, seed=run.cfg.seed)
    tmp = run.dir / "bench-tmp"
    per, parts = {}, []
    for seed in args.seeds:
        sets = {}
        for m in args.methods:
            words = None
            for kp in args.kp:
                t0 = time.perf_counter()
                mcfg = replace(run.cfg.methods, prediction_concepts=kp)
                method = build_method(m, mcfg, seed, tmp / f"{m}-{kp}-{seed}", run.store, rows)
                if isinstance(method, SplitConcepts) and words is not None:
                    method.words = words  # the word concepts do not depend on KP
                    pred = run.store.tokens["kind"].to_numpy()[rows] == "pred"
                    method.predictions.fit(run.store, rows[pred])
                    method.fit_info_ = {**words.fit_info_, "prediction_fit": method.predictions.fit_info_}
                else:
                    method.fit(run.store, rows)
                    if isinstance(method, SplitConcepts):
                        words = method.words
                cs = concept_set_of(run, m, method, rows, seed)
                key = f"{m}@{kp}"
                cal = cs.info["calibration"]
                per.setdefault(key, []).append({
                    "seed": seed, "kp": int(method.n_concepts - run.cfg.methods.n_concepts) if kp else 0,
                    **{f"test_prediction_{k}": v for k, v in prediction_concepts(cs, run.store.tokens).items()},
                    **name_measures(run, cs), "temperature": cal["temperature"], "ece_raw": cal["ece_raw"],
                    "ece_calibrated": cal["ece_calibrated"]})
                sets[key] = (method, cs)
                print(f"seed {seed} {key}: {time.perf_counter() - t0:.1f} s {per[key][-1]}", flush=True)
        t0 = time.perf_counter()
        got = faithfulness(run.explainer(sets), texts, seed=seed, cov=cov, batch_size=16, progress=False)
        print(f"seed {seed}: faithfulness of {len(sets)} concept sets in {time.perf_counter() - t0:.0f} s", flush=True)
        parts.append(got.assign(seed=seed))
    faith = pd.concat(parts, ignore_index=True)
    faith = faith[faith["target"].isin([PREDICTION, *MATCHED[PREDICTION]]) | (faith["method"] == "control")]
    matched = matched_differences(faith)

    table = []
    for key, ms in per.items():
        m, kp = key.split("@")
        row = {"method": m, "kp": int(kp)}
        for k in ms[0]:
            if k != "seed":
                row[k] = float(np.mean([x[k] for x in ms]))
        for control in MATCHED[PREDICTION]:
            d = matched[(matched["method"] == key) & (matched["target"] == PREDICTION) & (matched["control"] == control)]
            if len(d):
                d = d.iloc[0]
                row[f"minus {control}"] = [float(d["diff_conf_drop"]), float(d["diff_conf_drop_low"]),
                                           float(d["diff_conf_drop_high"])]
                row["energy"] = [float(d["energy_a"]), float(d["energy_b"])] if control == MATCHED[PREDICTION][0] \
                    else row.get("energy")
        table.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    command = "python bench/prediction_concepts.py " + " ".join(
        f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items())
    out = {"run": args.run, "seeds": args.seeds, "texts": len(texts), "command": command, "table": table,
           "per_seed": per}
    write_result(RESULTS / f"prediction_concepts_{args.run}.json", out)

    def ci(v):
        return f"{v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]" if isinstance(v, list) else "–"

    lines = [f"# Prediction concepts on `{args.run}` ({len(args.seeds)} seeds, {len(texts)} test sentences for "
             "faithfulness, all test predictions for the rest)", "", f"`{command}`", "",
             "| method | prediction concepts | mostly predictions | purity | distinct | largest share | names with a "
             "content word | distinct names | ECE raw → calibrated | pred. − matched concept | pred. − matched "
             "direction | energy target / matched concept |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table:
        e = r.get("energy") or [float("nan")] * 2
        lines.append(f"| {r['method']} | {r['kp'] or '0 (one set)'} | {r['test_prediction_mostly_predictions']:.2f} | "
                     f"{r['test_prediction_purity']:.2f} | {r['test_prediction_distinct']:.1f} | "
                     f"{r['test_prediction_largest_share']:.2f} | {r['content_word_share']:.2f} | "
                     f"{r['distinct_names']:.1f} | {r['ece_raw']:.3f} → {r['ece_calibrated']:.3f} | "
                     f"{ci(r.get('minus ' + MATCHED[PREDICTION][0]))} | {ci(r.get('minus ' + MATCHED[PREDICTION][1]))} | "
                     f"{e[0]:.3f} / {e[1]:.3f} |")
    (RESULTS / f"prediction_concepts_{args.run}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
