"""Compare two run directories' outputs: the store (bit for bit), each method's concept
assignments and vectors, the faithfulness table and the measures (within a float tolerance).

Usage: python scripts/compare_runs.py RUN_DIR_A RUN_DIR_B [--atol 1e-5]
Prints one line per compared item and exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _numbers(obj, prefix=""):
    """Flatten nested JSON into {path: number}; strings and lists of strings are skipped."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_numbers(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(_numbers(v, f"{prefix}[{i}]"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = float(obj)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--atol", type=float, default=1e-5, help="tolerance for float tables (default: 1e-5)")
    args = ap.parse_args()
    bad = 0

    def report(name: str, ok: bool, detail: str = "") -> None:
        nonlocal bad
        bad += not ok
        print(f"{'same' if ok else 'DIFFERENT':9s} {name} {detail}")

    shards = sorted(p.name for p in (args.a / "store").glob("vectors_*.npy"))
    same = shards == sorted(p.name for p in (args.b / "store").glob("vectors_*.npy")) and all(
        (args.a / "store" / s).read_bytes() == (args.b / "store" / s).read_bytes() for s in shards)
    report("store vectors (bytes)", same, f"{len(shards)} shards")
    ta, tb = pd.read_parquet(args.a / "store" / "tokens.parquet"), pd.read_parquet(args.b / "store" / "tokens.parquet")
    report("store tokens", ta.equals(tb), f"{len(ta)} rows")
    for m in ("vqlc", "kmeans", "lacoat"):
        da, db = args.a / "methods" / m, args.b / "methods" / m
        if not da.exists() or not db.exists():
            report(f"{m}", False, "missing in one run")
            continue
        aa, ab = np.load(da / "assignments.npy"), np.load(db / "assignments.npy")
        report(f"{m} assignments", np.array_equal(aa, ab), f"{int((aa != ab).sum())} of {len(aa)} rows differ")
        va, vb = np.load(da / "vectors.npy"), np.load(db / "vectors.npy")
        report(f"{m} concept vectors", np.allclose(va, vb, atol=args.atol, rtol=0),
               f"max |diff| {float(np.abs(va - vb).max()):.2e}")
        sa, sb = pd.read_parquet(da / "summary.parquet"), pd.read_parquet(db / "summary.parquet")
        report(f"{m} summary", sa.equals(sb))
    fa, fb = (pd.read_parquet(d / "eval" / "faithfulness.parquet") for d in (args.a, args.b))
    num = fa.select_dtypes("number").columns
    ok = fa.drop(columns=num).equals(fb.drop(columns=num)) and np.allclose(fa[num], fb[num], atol=args.atol, rtol=0)
    report("faithfulness table", ok, f"max |diff| {float(np.abs(fa[num].to_numpy() - fb[num].to_numpy()).max()):.2e}")
    ma, mb = (_numbers(json.loads((d / "eval" / "measures.json").read_text())) for d in (args.a, args.b))
    skip = ("fit_time_s", "peak_rss", "time_s", "train_time_s")  # measured timings and memory differ run to run
    keys = sorted(k for k in ma.keys() & mb.keys() if not any(s in k for s in skip))
    diff = [k for k in keys if abs(ma[k] - mb[k]) > args.atol * max(1.0, abs(ma[k]))]
    report("measures", not diff, f"{len(keys)} numbers compared (timings and memory skipped); "
           f"only in one run: {sorted((ma.keys() ^ mb.keys()))[:6]}" + (f"; differ: {diff[:5]}" if diff else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
