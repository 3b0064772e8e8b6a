"""Peak memory and speed of extraction as the corpus grows (issue: the store's memory is flat).

Each size runs in a fresh process (peak RSS is per process), writing a store of the first N
MR sentences with MiniLM. Usage: python bench/extract_memory.py [--sizes 1000 4000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    """Peak resident set of this process (VmHWM: starts afresh at exec, unlike ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(n: int, out: str, shard_rows: int) -> None:
    import numpy as np
    import pandas as pd

    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store
    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.data.models import resolve_model

    ds = load_dataset("mr", cache_dir=ROOT / "cache", limit=n, seed=0)
    texts = pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels, "split": "train"})
    bb = Backbone.from_source(resolve_model("minilm", cache_dir=ROOT / "cache"), max_length=128)
    base = peak_rss_mb()
    t0 = time.perf_counter()
    store = build_store(bb, texts, ExtractConfig(layer=5, shard_rows=shard_rows), out, progress=False)
    dt = time.perf_counter() - t0
    peak = peak_rss_mb()
    print(json.dumps({"n_texts": n, "n_rows": store.n_rows, "seconds": round(dt, 2),
                      "rows_per_s": round(store.n_rows / dt, 1), "rss_before_mb": round(base, 1),
                      "peak_rss_mb": round(peak, 1)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000], help="numbers of MR texts")
    ap.add_argument("--shard-rows", type=int, default=16384, help="rows per store shard")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.out, a.shard_rows)
    results = []
    for n in a.sizes:
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, __file__, "--child", str(n), "--out", str(Path(d) / "store"),
                                "--shard-rows", str(a.shard_rows)], capture_output=True, text=True, cwd=ROOT, check=True)
            results.append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(results[-1])
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    write_result(ROOT / "bench" / "results" / "extract_memory.json", results, indent=2)
    if len(results) > 1:
        print(f"peak RSS ratio {results[-1]['n_texts']}/{results[0]['n_texts']} texts: "
              f"{results[-1]['peak_rss_mb'] / results[0]['peak_rss_mb']:.3f}")


if __name__ == "__main__":
    main()
