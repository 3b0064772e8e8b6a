"""Is the explainer's time on a GPU spent building attention plans for new input shapes? The
`decoder` check run is built on the device as bench/gpu_check.py builds it (device half only),
then the explainer answers fresh 40-word inputs with each scaled-dot-product-attention backend
setting in turn: cuDNN's attention off first (flash / memory-efficient kernels, no per-shape
plan), then torch's default (cuDNN first on Hopper), each on inputs it has not seen, and again on
the same inputs (shapes seen). Writes bench/results/gpu_attention.json (and $OUT's copy).

    bench/gpu_check.sh's environment, then: python bench/gpu_attention.py --device cuda"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(ex, texts, sync) -> dict:
    times = []
    for t in texts:
        t0 = time.perf_counter()
        ex.explain(t)
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return {"n": len(texts), "p50_ms": round(float(np.percentile(times, 50)), 1),
            "p95_ms": round(float(np.percentile(times, 95)), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--texts", type=int, default=800)
    ap.add_argument("--n", type=int, default=30, help="fresh inputs per setting (default: 30)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_attention.json"))
    args = ap.parse_args()
    import torch
    from gpu_check import build_on, model_source, write_result  # beside this script
    from latency import inputs_of_length

    from vqlc_core.base.hardware import resolve_device
    from vqlc_core.pipeline.run import Run

    device = resolve_device(args.device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    model, _ = model_source("auto")
    ns = argparse.Namespace(texts=args.texts, concepts=100, finetune_steps=30)
    run = build_on(device, "on-device", ns, model, ROOT / "cache" / "gpu_check")
    os.environ["VQLC_DEVICE"] = device
    ex = Run(run.dir).explainer(["vqlc"])
    sentences = Run(run.dir).texts["text"].tolist()
    pool = inputs_of_length(sentences, 40, 3 * args.n + 1)
    ex.explain(pool[-1])  # CUDA context, first kernels
    out = {"device": device, "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
           "torch": torch.__version__}
    settings = [("cudnn_sdp_off", False), ("default", True)]
    for i, (name, cudnn) in enumerate(settings):
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        fresh = pool[i * args.n:(i + 1) * args.n]
        out[name] = {"fresh_inputs": timed(ex, fresh, sync), "seen_inputs": timed(ex, fresh, sync)}
    torch.backends.cuda.enable_cudnn_sdp(False)  # off once more, after the default: the order's effect
    out["cudnn_sdp_off_again_fresh"] = timed(ex, pool[2 * args.n:3 * args.n], sync)
    torch.backends.cuda.enable_cudnn_sdp(True)
    write_result(json.dumps(out, indent=1) + "\n", args.out)


if __name__ == "__main__":
    main()
