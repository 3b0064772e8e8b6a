"""What the batch's dropout masks cost a fine-tuning step (vqlc_core/data/dropout.py).

Every step of `finetune` runs under `batch_masks`, so that a row's dropout mask does not depend on
how torchrun cuts the batch: the masks come from `torch.rand` over the whole batch and the
attention of a model with attention dropout (MiniLM) is eager while it trains. This times
`tuning.train_step` with it against torch's own dropout (fused SDPA attention, masks drawn per
part), one process, one thread, the default build's settings (full fine-tuning of MiniLM, batch
32, MR train texts in length-bucketed batches), interleaved, `--repeats` times; medians.

Usage: python bench/dropout_cost.py [--steps 20] [--repeats 3]
Writes bench/results/dropout_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "dropout_cost.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="training steps per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each variant")
    a = ap.parse_args()
    import numpy as np
    import torch
    from torch import nn

    from vqlc_core.data import tuning
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.data.models import resolve_model
    from vqlc_core.data.settings import FinetuneConfig

    torch.set_num_threads(1)
    cache = ROOT / "cache"
    ds = load_dataset("mr", cache_dir=cache, limit=4000, seed=0)
    texts, y = ds.texts, torch.as_tensor(np.array(ds.labels), dtype=torch.long)
    batches = tuning.bucketed_batches(np.asarray([len(t) for t in texts]), 32, np.random.default_rng(0))[: a.steps]
    plan = FinetuneConfig(finetune="full", finetune_dtype="float32").plan("full", 0)
    own = tuning.batch_masks

    def timed(masks: bool) -> float:
        bb = Backbone.from_source(resolve_model("minilm", cache_dir=cache))
        bb.model.requires_grad_(True)
        head = nn.Linear(bb.hidden_size, 2)
        opt = torch.optim.AdamW([{"params": list(bb.model.parameters()), "peak_lr": 2e-5},
                                 {"params": list(head.parameters()), "peak_lr": 1e-3}])
        tuning.batch_masks = own if masks else (lambda *args: contextlib.nullcontext())
        try:
            torch.manual_seed(0)
            t0 = time.perf_counter()
            for idx in batches:
                tuning.train_step(bb, head, opt, [texts[i] for i in idx], y[idx], 1.0, plan)
            return (time.perf_counter() - t0) / len(batches)
        finally:
            tuning.batch_masks = own

    times = {"batch masks": [], "torch's dropout": []}
    for _ in range(a.repeats):
        times["batch masks"].append(timed(True))
        times["torch's dropout"].append(timed(False))
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"steps": len(batches), "repeats": a.repeats, "threads": 1, "model": "minilm", "batch": 32,
              "s_per_step": {k: [round(x, 4) for x in v] for k, v in times.items()},
              "median_s_per_step": {k: round(v, 4) for k, v in med.items()},
              "ratio": round(med["batch masks"] / med["torch's dropout"], 3),
              "command": "python bench/dropout_cost.py " + f"--steps {a.steps} --repeats {a.repeats}"}
    write_result(OUT, result, indent=2)
    print(result)


if __name__ == "__main__":
    main()
