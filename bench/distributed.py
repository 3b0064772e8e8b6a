"""Throughput of extraction and of VQLC training in one process against two under torchrun
(gloo, CPU), in rows per second. Each configuration is a fresh launch; the timed spans start
after every rank has loaded the model and end when the last rank is done (barriers).

Usage: python bench/distributed.py [--texts 400] [--epochs 3]; writes bench/results/distributed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]

# (processes, threads per process): one process on one core, one process on both, two on one each.
CONFIGS = [(1, 1), (1, 2), (2, 1)]


def worker(a) -> None:
    import numpy as np
    import pandas as pd
    import torch

    from vqlc_core.base import distributed
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store
    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.data.models import resolve_model
    from vqlc_core.methods.vqlc import VQLC

    distributed.init()
    ds = load_dataset("mr", cache_dir=ROOT / "cache", limit=a.texts, seed=0)
    texts = pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels, "split": "train"})
    bb = Backbone.from_source(resolve_model("minilm", cache_dir=ROOT / "cache"), max_length=128)
    distributed.barrier()
    t0 = time.perf_counter()
    store = build_store(bb, texts, ExtractConfig(layer=5, chunk_texts=32), Path(a.out) / "store", progress=False)
    distributed.barrier()
    t1 = time.perf_counter()
    VQLC(n_concepts=64, epochs=a.epochs, batch_size=1024, progress=False).fit(store)
    distributed.barrier()
    t2 = time.perf_counter()
    if distributed.is_main():
        print("RESULT " + json.dumps({
            "processes": distributed.world(), "threads_per_process": torch.get_num_threads(),
            "n_texts": len(texts), "n_rows": store.n_rows, "extract_s": round(t1 - t0, 2),
            "extract_rows_per_s": round(store.n_rows / (t1 - t0), 1), "train_s": round(t2 - t1, 2),
            "train_rows_per_s": round(store.n_rows * a.epochs / (t2 - t1), 1)}))
    distributed.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--texts", type=int, default=400, help="MR sentences to extract")
    ap.add_argument("--epochs", type=int, default=3, help="VQLC epochs over every row of the store")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    results = []
    for procs, threads in CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"}
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
                   __file__, "--worker", "--out", tmp, "--texts", str(a.texts), "--epochs", str(a.epochs)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT "):]))
        print(results[-1], flush=True)
    report = {"machine_cpus": os.cpu_count(), "note": "CPU, gloo; the machine is shared, so figures are noisy",
              "results": results}
    dest = ROOT / "bench" / "results" / "distributed.json"
    write_result(dest, report, indent=2)
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
