"""Where the explainer's time goes on a device: cProfile of 40-word explanations on a built run,
after one warm-up call, top entries by cumulative time (run after bench/gpu_check.py on a lent GPU
machine: its run cache/gpu_check/runs/on-device is the default).

    python bench/gpu_profile.py --device cuda [--run DIR] [--n 20]
Writes bench/results/gpu_profile.txt (and $OUT/gpu_profile.txt when $OUT is set)."""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="the device the explainer runs on (default: cuda)")
    ap.add_argument("--run", default=str(ROOT / "cache" / "gpu_check" / "runs" / "on-device"), help="a built run")
    ap.add_argument("--n", type=int, default=20, help="explanations profiled (default: 20)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_profile.txt"))
    args = ap.parse_args()
    import torch
    from gpu_check import write_result  # beside this script
    from latency import inputs_of_length

    from vqlc_core.pipeline.run import Run

    os.environ["VQLC_DEVICE"] = args.device
    run = Run(args.run)
    ex = run.explainer(["vqlc"])
    sentences = run.texts[run.texts["split"] == "test"]["text"].tolist()
    ex.explain(sentences[0])
    texts = inputs_of_length(sentences, 40, args.n)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for text in texts:
        ex.explain(text)
    prof.disable()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1000 / len(texts)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
    buf2 = io.StringIO()
    pstats.Stats(prof, stream=buf2).sort_stats("tottime").print_stats(25)
    text = f"device {args.device}, {len(texts)} explanations of 40 words, {wall:.1f} ms each (profiled)\n\n" \
           + buf.getvalue() + "\n\nby own time\n" + buf2.getvalue()
    if torch.cuda.is_available():  # the kernels' own time, which cProfile sees only where the host waits
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            for t in texts[:5]:
                ex.explain(t)
            torch.cuda.synchronize()
        text += "\n\ntorch.profiler, 5 explanations, by device time\n" + tp.key_averages().table(
            sort_by="cuda_time_total", row_limit=30, max_name_column_width=70)
        text += "\n\nby host time\n" + tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=25,
                                                                   max_name_column_width=70)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
