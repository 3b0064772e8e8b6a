"""The fit set of built runs under the shared cap it had before (10,000 rows in all, every train
prediction row kept first, word rows filling the rest) and under the budgets it has now (word rows
and prediction rows apart, `--fit-max-words` and `--fit-max-predictions`), and, where the run's
methods are built, how many word concepts of each have at least 5 fit members.

Usage: python bench/fit_set_sizes.py --runs default bbcsent
Writes bench/results/fit_set_sizes.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
OLD_CAP = 10000


def shared_cap(rows: np.ndarray, is_pred: np.ndarray, max_rows: int, seed: int) -> np.ndarray:
    """The fit set's rows under the earlier rule: every prediction row, word rows sampled to fill
    `max_rows` in all (none left when there are as many train texts)."""
    if len(rows) <= max_rows:
        return rows
    words = rows[~is_pred]
    n = min(max(max_rows - int(is_pred.sum()), 0), len(words))
    return np.sort(np.concatenate([rows[is_pred], np.random.default_rng(seed).choice(words, size=n, replace=False)]))


def sizes(name: str) -> dict:
    from vqlc_core.data.store import fit_set_rows
    from vqlc_core.pipeline.run import open_run

    run = open_run(name)
    fs, tokens = run.cfg.fitset, run.store.tokens
    kind = tokens["kind"].to_numpy()
    train = tokens[tokens["split"] == "train"]
    lacoat = train.index.to_numpy()[fit_set_rows(train.reset_index(drop=True), fs.max_per_word, fs.min_word_count,
                                                  seed=run.cfg.seed)]
    before = shared_cap(lacoat, kind[lacoat] == "pred", OLD_CAP, run.cfg.seed)
    now = np.load(run.dir / "fitset.npy")
    out = {"run": name, "train_texts": int((run.texts["split"] == "train").sum()),
           "lacoat_rule": {"word_rows": int((kind[lacoat] != "pred").sum()), "prediction_rows": int((kind[lacoat] == "pred").sum())},
           "before": {"word_rows": int((kind[before] != "pred").sum()), "prediction_rows": int((kind[before] == "pred").sum())},
           "now": {"word_rows": int((kind[now] != "pred").sum()), "prediction_rows": int((kind[now] == "pred").sum()),
                   "caps": [fs.fit_max_words, fs.fit_max_predictions]},
           "concepts_with_5_members": {}}
    for m in run.methods_built():
        cs = run.concept_set(m)
        a = cs.assignments[now]
        words = a[kind[now] != "pred"]
        k = getattr(run.method(m), "n_word_concepts", cs.n_concepts)
        counts = np.bincount(words[words < k], minlength=k)
        out["concepts_with_5_members"][m] = {"of": int(k), "with_5": int((counts >= 5).sum())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["default"], help="built runs (their fitset stage at least)")
    args = ap.parse_args()
    got = [sizes(n) for n in args.runs]
    write_result(ROOT / "bench" / "results" / "fit_set_sizes.json", {"runs": got})
    print("| run | train texts | LACOAT's rule: word / prediction rows | before (shared cap of 10,000): word / "
          "prediction rows | now: word / prediction rows | word concepts with ≥ 5 fit members |")
    print("|---|---:|---|---|---|---|")
    for r in got:
        c = ", ".join(f"{m} {v['with_5']} of {v['of']}" for m, v in r["concepts_with_5_members"].items()) or "(not built)"
        print(f"| {r['run']} | {r['train_texts']:,} | {r['lacoat_rule']['word_rows']:,} / {r['lacoat_rule']['prediction_rows']:,} "
              f"| {r['before']['word_rows']:,} / {r['before']['prediction_rows']:,} | {r['now']['word_rows']:,} / "
              f"{r['now']['prediction_rows']:,} | {c} |")


if __name__ == "__main__":
    main()
