"""Which precision fine-tuning is faster in on this CPU: `tuning.train_step` in float32 against
bf16 autocast, the default build's settings (full fine-tuning of MiniLM, batch 32, MR train texts
in length-bucketed batches, eager attention and the batch's dropout masks, fused AdamW), each
variant a fresh model, its first step a warm-up, interleaved `--repeats` times; medians, for each
thread count in `--threads`. What `hardware.fast_bf16` (the "auto" precision) rests on.

Usage: python bench/finetune_precision.py [--steps 10] [--repeats 2] [--threads 1 2]
Writes bench/results/finetune_precision.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "finetune_precision.json"
DTYPES = ("float32", "bfloat16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="training steps per measurement, the first a warm-up")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each precision")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to measure at")
    a = ap.parse_args()
    import numpy as np
    import torch
    from torch import nn

    from vqlc_core.base.hardware import fast_bf16, native_bf16
    from vqlc_core.data import tuning
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.data.dropout import eager_attention
    from vqlc_core.data.models import resolve_model
    from vqlc_core.data.settings import FinetuneConfig

    cache = ROOT / "cache"
    ds = load_dataset("mr", cache_dir=cache, limit=4000, seed=0)
    texts, y = ds.texts, torch.as_tensor(np.array(ds.labels), dtype=torch.long)
    batches = tuning.bucketed_batches(np.asarray([len(t) for t in texts]), 32, np.random.default_rng(0))[: a.steps]

    def timed(dtype: str) -> float:
        plan = FinetuneConfig(finetune="full", finetune_dtype=dtype).plan("full", 0)
        bb = Backbone.from_source(resolve_model("minilm", cache_dir=cache))
        bb.model.requires_grad_(True)
        head = nn.Linear(bb.hidden_size, 2)
        params = [*bb.model.parameters(), *head.parameters()]
        opt = torch.optim.AdamW([{"params": params[:-2], "peak_lr": 3e-5}, {"params": params[-2:], "peak_lr": 1e-3}],
                                weight_decay=0.01, fused=True)
        with eager_attention(bb.model):
            torch.manual_seed(0)
            t0 = None
            for k, idx in enumerate(batches):
                if k == 1:
                    t0 = time.perf_counter()  # the first step warms up
                tuning.train_step(bb, head, opt, [texts[i] for i in idx], y[idx], 1.0, plan, seed=k)
        return (time.perf_counter() - t0) / (len(batches) - 1)

    per_threads = {}
    for n in a.threads:
        torch.set_num_threads(n)
        times = {d: [] for d in DTYPES}
        for _ in range(a.repeats):
            for d in DTYPES:
                times[d].append(timed(d))
                print(f"{n} thread(s), {d}: {times[d][-1]:.3f} s a step", flush=True)
        med = {d: statistics.median(v) for d, v in times.items()}
        per_threads[str(n)] = {"s_per_step": {d: [round(x, 4) for x in v] for d, v in times.items()},
                               "median_s_per_step": {d: round(v, 4) for d, v in med.items()},
                               "bf16_over_fp32": round(med["bfloat16"] / med["float32"], 3)}
    result = {"model": "minilm", "batch": 32, "steps_timed": len(batches) - 1, "repeats": a.repeats,
              "cpu_avx512_bf16_or_amx": native_bf16(), "cpu_amx": fast_bf16(),
              "auto_means": "bfloat16" if fast_bf16() else "float32", "threads": per_threads,
              "command": "python bench/finetune_precision.py " +
                         f"--steps {a.steps} --repeats {a.repeats} --threads {' '.join(map(str, a.threads))}"}
    write_result(OUT, result, indent=2)
    print(result)


if __name__ == "__main__":
    main()
