"""Does the prediction concept's name say something? Through the public explainer, as a notebook
would: for a seeded sample of test sentences, the label of the top prediction concept
(`open_run(run).explainer(methods=(m,)).explain(text).methods[m].prediction_concepts[0].label`)
and whether it holds a content word (`naming.content_words`: two or more letters, no English stop
word, no class name; a prediction concept's class phrase does not count), how many distinct
concepts they are, and the shown probability's median. (Issue "The concept behind a prediction".)

Usage: python bench/prediction_names.py --run default [--methods vqlc kmeans lacoat] [--n 100] [--seed 0]
Writes bench/results/prediction_names_<run>.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="a built run (name under cache/runs or a path)")
    ap.add_argument("--methods", nargs="+", default=["vqlc", "kmeans", "lacoat"], help="methods (default: all three)")
    ap.add_argument("--n", type=int, default=100, help="test sentences, a seeded sample (default: 100)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default: 0)")
    ap.add_argument("--out", default=None, help="results file (default: bench/results/prediction_names_<run>.json)")
    args = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(1)
    import vqlc_core as vq
    from vqlc_core.methods.naming import content_words

    run = vq.open_run(args.run)
    test = run.texts[run.texts["split"] == "test"]["text"].tolist()
    pick = np.sort(np.random.default_rng(args.seed).choice(len(test), size=min(args.n, len(test)), replace=False))
    texts = [test[i] for i in pick]
    out = {"run": args.run, "n": len(texts), "seed": args.seed, "methods": {}}
    for m in args.methods:
        explainer = run.explainer(methods=(m,))
        tops = [explainer.explain(t).methods[m].prediction_concepts[0] for t in texts]
        has = [bool(content_words(c.label, run.class_names)) for c in tops]
        out["methods"][m] = {"content_word_share": float(np.mean(has)),
                             "distinct_concepts": len({c.concept for c in tops}),
                             "median_probability": float(np.median([c.probability for c in tops])),
                             "examples": [[t, c.label, round(c.probability, 3)] for t, c in zip(texts[:5], tops)]}
        print(m, json.dumps({k: v for k, v in out["methods"][m].items() if k != "examples"}), flush=True)
        for t, label, p in out["methods"][m]["examples"][:3]:
            print(f"   {label}  p={p}  <- {t[:70]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = Path(args.out) if args.out else RESULTS / f"prediction_names_{Path(args.run).name}.json"
    write_result(path, out)


if __name__ == "__main__":
    main()
