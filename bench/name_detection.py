"""Do a word concept's name words pick its held-out members? Per method of a built run, the
detection score of `vqlc_core.evaluate.name_detection` (balanced accuracy on the test split's word
rows, members against an equal seeded draw of non-members) for the names the pages show (class-
based TF-IDF) and for frequency names, over every word concept with test members: mean with a 95%
bootstrap interval over concepts, and the paired difference c-TF-IDF minus frequency.

Usage: python bench/name_detection.py --run default [--methods vqlc kmeans lacoat] [--words 3]
Writes bench/results/name_detection_<run>.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
from pathlib import Path

from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def boot_mean(values, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of `values` with a 95% percentile-bootstrap interval."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(1)
    return float(v.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="a built run (name under cache/runs or a path)")
    ap.add_argument("--methods", nargs="+", default=None, help="methods (default: every method the run built)")
    ap.add_argument("--words", type=int, default=3, help="name words per concept (default: 3, as the pages show)")
    ap.add_argument("--seed", type=int, default=0, help="the negatives' seed (default: 0)")
    ap.add_argument("--out", default=None, help="results file (default: bench/results/name_detection_<run>.json)")
    args = ap.parse_args()

    import numpy as np

    import vqlc_core as vq
    from vqlc_core.evaluate.name_detection import NAMES, detection_scores, name_words
    from vqlc_core.methods.concepts import is_prediction_concept

    run = vq.open_run(args.run)
    tokens = run.store.tokens
    out = {"run": args.run, "words": args.words, "seed": args.seed, "methods": {}}
    print(f"| method | concepts | {' | '.join(NAMES)} | c-TF-IDF minus frequency |")
    print("|---|---|" + "---|" * (len(NAMES) + 1))
    for m in args.methods or run.methods_built():
        cs = run.concepts(m)
        ids = [k for k in cs.used_ids() if not is_prediction_concept(cs.summary.loc[k])]
        names = name_words(cs, ids, args.words)
        scores = {kind: detection_scores(cs.assignments, tokens, names[kind], seed=args.seed).set_index("concept")
                  for kind in NAMES}
        common = scores[NAMES[0]].index.intersection(scores[NAMES[1]].index)
        a, b = (scores[kind].loc[common, "balanced_accuracy"].to_numpy() for kind in NAMES)
        same = float(np.mean([names[NAMES[0]][k] == names[NAMES[1]][k] for k in common]))
        row = {"concepts": int(len(common)), "same_name_share": same,
               **{kind: dict(zip(("mean", "low", "high"), boot_mean(s["balanced_accuracy"], seed=args.seed)))
                  for kind, s in scores.items()},
               **{f"{kind} tpr": float(s["tpr"].mean()) for kind, s in scores.items()},
               "difference": dict(zip(("mean", "low", "high"), boot_mean(a - b, seed=args.seed)))}
        out["methods"][m] = row
        cell = lambda d: f"{d['mean']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"  # noqa: E731
        print(f"| {m} | {row['concepts']} | " + " | ".join(cell(row[k]) for k in NAMES)
              + f" | {cell(row['difference'])} |", flush=True)
    path = Path(args.out) if args.out else RESULTS / f"name_detection_{Path(args.run).name}.json"
    write_result(path, out)


if __name__ == "__main__":
    main()
