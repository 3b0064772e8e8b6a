"""A labelled data set of ordinary size for the fit-set and scaling benches: the BBC News articles
(the `bbc` preset) cut into sentences, each labelled with its article's topic, written as a CSV
that `vqlc build --dataset FILE` reads. Sentences of 6 to 60 words; a seeded sample of `--n`.

Usage: python bench/bbc_sentences.py [--n 12500] [--out cache/datasets/bbc_sentences.csv]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def sentences(n: int, seed: int = 0) -> pd.DataFrame:
    """`n` seeded sentences of the BBC articles (6 to 60 words), columns text and label."""
    from vqlc_core.data.datasets import load_dataset

    ds = load_dataset("bbc")
    rows = []
    for text, label in zip(ds.texts, ds.labels):
        for s in SPLIT.split(text):
            if 6 <= len(s.split()) <= 60:
                rows.append((s.strip(), ds.class_names[int(label)]))
    df = pd.DataFrame(rows, columns=["text", "label"]).drop_duplicates("text")
    pick = np.random.default_rng(seed).choice(len(df), size=min(n, len(df)), replace=False)
    return df.iloc[np.sort(pick)].reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=12500, help="sentences to keep (seeded sample)")
    ap.add_argument("--out", default=str(ROOT / "cache" / "datasets" / "bbc_sentences.csv"), help="the CSV to write")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    df = sentences(a.n, a.seed)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out, index=False)
    print(f"wrote {len(df):,} sentences to {a.out}: " + ", ".join(f"{k} {v}" for k, v in df["label"].value_counts().items()))


if __name__ == "__main__":
    main()
