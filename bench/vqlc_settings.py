"""Which VQLC settings, and which concept vectors, explain predictions? (Issue "Concepts that
explain predictions".)

On a built run (its store, fit set and classifier), every VQLC variant below and the K-Means
and LACOAT references are fitted once per seed on the run's fit set; every concept set is then
evaluated under each concept-vector definition (`concepts.CONCEPT_VECTORS`) in one faithfulness
pass per seed (the same sentences, salient words and energy-matched controls for all).

Per (method or variant, definition), over seeds and the test sentences, with 95% crossed
bootstrap intervals: the prediction concept's confidence drop minus its energy-matched other
concept and minus its energy-matched N(0, Σ) direction, the same for the salient-word concepts;
then per variant: distinct test prediction concepts, the largest one's share, their purity (true
labels of train members), dev R² of the concept vectors, perplexity and dead codes over all
rows, fit time, and the AMI between seeds.

Usage: python bench/vqlc_settings.py --run default [--seeds 0 1 2] [--variants ...] [--texts 400]
Writes bench/results/vqlc_settings_<run>.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # a shared machine: one thread for every library

import argparse
import json
import time
from itertools import combinations
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

# name -> VQLC parameters (the rest at the estimator's defaults); "paper" and "default" are
# vqlc.VARIANTS, the others change one thing of the paper's settings at a time or combine them.
CHANGES = {
    "paper+ortho": {"ortho_weight": 4.0},  # the settings before this issue
    "paper+kmeans++": {"init": "kmeans++"},
    "paper+random-reseed": {"reseed": "random"},
    "paper+row-norm": {"normalize": "center_row"},
    "kmeans++,random-reseed": {"init": "kmeans++", "reseed": "random"},
    "kmeans++,random-reseed,row-norm": {"init": "kmeans++", "reseed": "random", "normalize": "center_row"},
}
REFERENCES = ("kmeans", "lacoat")


def variants() -> dict[str, dict]:
    from vqlc_core.methods.options import VARIANTS

    out = {"paper": dict(VARIANTS["paper"]), "default": dict(VARIANTS["default"])}
    out.update({name: {**VARIANTS["paper"], **change} for name, change in CHANGES.items()})
    return out


def fit_one(run, name: str, seed: int, rows):
    """(fitted method, its ConceptSet) of a VQLC variant or a reference method."""
    from vqlc_core.methods.concepts import ConceptSet
    from vqlc_core.methods.registry import method_class
    from vqlc_core.methods.vqlc import VQLC

    if name in REFERENCES:
        method = method_class(name).from_config(run.cfg.methods, seed, run.dir / "bench-tmp")
    else:
        method = VQLC(n_concepts=run.cfg.methods.n_concepts, seed=seed, progress=False, **variants()[name])
    method.fit(run.store, rows=rows)
    a = method.predict_store(run.store)
    cs = ConceptSet.from_assignments(name, run.store, a, method.n_concepts, run.class_names,
                                     extra=method.concept_extra(), info=dict(method.fit_info_), seed=seed,
                                     fit_rows=rows, centres=method.concept_centres(run.store, rows))
    return method, cs


def measures(run, method, cs) -> dict:
    from vqlc_core.evaluate.evaluation import prediction_concepts
    from vqlc_core.methods.metrics import centroid_r2, codebook_perplexity, dead_codes

    dev = run.store.rows_where(split="dev")
    out = {f"test_prediction_{k}": v for k, v in prediction_concepts(cs, run.store.tokens).items()}
    out.update({"perplexity": float(codebook_perplexity(cs.assignments, cs.n_concepts)),
                "dead": int(dead_codes(cs.assignments, cs.n_concepts)), "fit_time_s": cs.info["fit_time_s"]})
    for definition in ("fitset", "train", "centre"):
        out[f"dev_r2_{definition}"] = float(centroid_r2(run.store, dev, cs.assignments,
                                                        cs.with_vectors(definition).vectors))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="a built run under cache/runs (default: default)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    ap.add_argument("--variants", nargs="+", default=None,
                    help="VQLC variants and reference methods to fit (default: all: " +
                         ", ".join([*variants(), *REFERENCES]) + ")")
    ap.add_argument("--definitions", nargs="+", default=["fitset", "train", "centre"],
                    help="concept-vector definitions to evaluate (default: fitset train centre)")
    ap.add_argument("--texts", type=int, default=400, help="test sentences per faithfulness pass (default: 400)")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    torch.set_num_threads(1)
    from vqlc_core.evaluate.evaluation import faithfulness_sentences, train_covariance
    from vqlc_core.evaluate.faithfulness import (MATCHED, PREDICTION, SALIENT, faithfulness, matched_differences,
                                        summarize_faithfulness)
    from vqlc_core.methods.metrics import assignment_ami
    from vqlc_core.pipeline.run import Run

    run = Run(ROOT / "cache" / "runs" / args.run)
    names = args.variants or [*variants(), *REFERENCES]
    rows = np.load(run.dir / "fitset.npy")
    texts = faithfulness_sentences(run.texts, args.texts, run.cfg.seed)  # a seeded sample: MR lists one class first
    cov = train_covariance(run.store, seed=run.cfg.seed)
    parts, per_variant, assignments = [], {}, {}
    for seed in args.seeds:
        methods = {}
        for name in names:
            t0 = time.perf_counter()
            method, cs = fit_one(run, name, seed, rows)
            per_variant.setdefault(name, []).append({"seed": seed, **measures(run, method, cs)})
            assignments.setdefault(name, []).append(cs.assignments)
            for definition in args.definitions:
                methods[f"{name}@{definition}"] = (method, cs.with_vectors(definition))
            print(f"seed {seed} {name}: fitted in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        got = faithfulness(run.explainer(methods), texts, seed=seed, cov=cov, batch_size=16, progress=False)
        print(f"seed {seed}: faithfulness of {len(methods)} concept sets in {time.perf_counter() - t0:.0f} s", flush=True)
        parts.append(got.assign(seed=seed))
    faith = pd.concat(parts, ignore_index=True)
    matched = matched_differences(faith)
    summary = summarize_faithfulness(faith)

    table = []
    for key in dict.fromkeys(faith.loc[faith["method"] != "control", "method"]):
        name, definition = key.split("@")
        ms = per_variant[name]
        row = {"method": name, "vectors": definition, "seeds": len(ms)}
        for target in (PREDICTION, SALIENT):
            s = summary[(summary["method"] == key) & (summary["target"] == target)].iloc[0]
            row[f"{target} drop"] = [s["mean_conf_drop"], s["conf_drop_low"], s["conf_drop_high"]]
            row[f"{target} energy"] = s["mean_energy"]
            for control in MATCHED[target]:
                m = matched[(matched["method"] == key) & (matched["target"] == target) & (matched["control"] == control)]
                if len(m):
                    m = m.iloc[0]
                    row[f"{target} − {control}"] = [m["diff_conf_drop"], m["diff_conf_drop_low"],
                                                    m["diff_conf_drop_high"]]
                    row[f"{control} energy"] = m["energy_b"]
        for k in ("test_prediction_distinct", "test_prediction_largest_share", "test_prediction_purity",
                  "perplexity", "dead", "fit_time_s"):
            row[k] = float(np.mean([x[k] for x in ms]))
        row["dev_r2"] = float(np.mean([x[f"dev_r2_{definition}"] for x in ms]))
        a = assignments[name]
        row["seed_ami"] = float(np.mean([assignment_ami(x, y) for x, y in combinations(a, 2)])) if len(a) > 1 else None
        table.append(row)

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"run": args.run, "seeds": args.seeds, "texts": len(texts), "command": "python bench/vqlc_settings.py " +
           " ".join(f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
                    if v is not None),
           "variants": {n: variants().get(n, "reference") for n in names}, "table": table, "per_seed": per_variant}
    write_result(RESULTS / f"vqlc_settings_{args.run}.json", out)

    def ci(v):
        return f"{v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]" if isinstance(v, list) else "–"

    lines = [f"# VQLC settings and concept vectors on `{args.run}` ({len(args.seeds)} seeds, {len(texts)} test "
             "sentences)", "", f"`{out['command']}`", "",
             "| method | vectors | pred. drop | pred. − matched concept | pred. − matched direction | salient − matched "
             "concepts | salient − matched directions | pred. energy (matched concept / direction) | distinct | "
             "largest share | purity | dev R² | perplexity | seed AMI | fit s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table:
        ami = "–" if r["seed_ami"] is None else f"{r['seed_ami']:.2f}"
        lines.append(
            f"| {r['method']} | {r['vectors']} | {ci(r[f'{PREDICTION} drop'])} | "
            f"{ci(r.get(f'{PREDICTION} − {MATCHED[PREDICTION][0]}'))} | {ci(r.get(f'{PREDICTION} − {MATCHED[PREDICTION][1]}'))} | "
            f"{ci(r.get(f'{SALIENT} − {MATCHED[SALIENT][0]}'))} | {ci(r.get(f'{SALIENT} − {MATCHED[SALIENT][1]}'))} | "
            f"{r[f'{PREDICTION} energy']:.3f} ({r.get(MATCHED[PREDICTION][0] + ' energy', float('nan')):.3f} / "
            f"{r.get(MATCHED[PREDICTION][1] + ' energy', float('nan')):.3f}) | {r['test_prediction_distinct']:.1f} | "
            f"{r['test_prediction_largest_share']:.2f} | {r['test_prediction_purity']:.2f} | {r['dev_r2']:.3f} | "
            f"{r['perplexity']:.0f} | {ami} | "
            f"{r['fit_time_s']:.1f} |")
    (RESULTS / f"vqlc_settings_{args.run}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
