"""The GPU path checked end to end, in one short run (issue: the models the paper studies).

On `--device` (a lent GPU machine: cuda), the `decoder` preset with one seed and capped
fine-tuning is built through the stages the explainer needs (texts, finetune, extract,
classifier, fitset, vqlc); then the same run, with the same fine-tuned weights, is extracted and
fitted again on the CPU. It reports extraction tokens/s and VQLC's fit time on each device, the
explainer's p50/p95 for 40-word inputs on the device, and how well the two agree: the stored
states (float16 on disk) within float16 tolerance, and VQLC's assignments with a fixed seed.

The model is the preset's SmolLM2-135M when it is here. Where it is not (a device machine gets
only the working tree, at most 64 MiB, and SmolLM2's weights are 270 MB), a SmolLM2-shaped
model with random weights is written instead (`bench/big_model.py`, tokenizer from
cache/bench_tokenizer/): speed and agreement are measured as well on it, concepts mean nothing.

`bench/gpu_check.sh` runs this under a time limit; `--device cpu` is its dry run on a machine
with no GPU. Writes bench/results/gpu_check.json (and $OUT/gpu_check.json when $OUT is set).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["texts", "finetune", "extract", "classifier", "fitset", "vqlc"]


def model_source(name: str) -> tuple[str, bool]:
    """(the --model to build with, whether its weights are random)."""
    from vqlc_core.base.runio import SourceError
    from vqlc_core.data.models import resolve_model

    if name != "auto":
        return name, False
    try:
        resolve_model("smollm2-135m", cache_dir=ROOT / "cache")
        return "smollm2-135m", False
    except SourceError:
        from big_model import write_model  # beside this script

        out = ROOT / "cache" / "bench_models" / "135m"
        write_model("135m", out)
        return str(out), True


def build_on(device: str, run: str, args, model: str, cache: Path, from_run: Path | None = None):
    """The check's stages built on `device`; from `from_run`'s texts and fine-tuned weights when given."""
    from vqlc_core.pipeline.config import preset
    from vqlc_core.pipeline.build import build
    from vqlc_core.pipeline.run import Run

    # the CPU's run loads the weights in the dtype the device's did: the same model, another device
    weights = Run(from_run).manifest.data["stages"]["extract"]["weights"]["dtype"] if from_run else None
    cfg = preset("decoder", run=run, cache_dir=cache, device=device, model=model, limit=args.texts,
                 seeds=[0], methods=["vqlc"], n_concepts=args.concepts, finetune_max_steps=args.finetune_steps,
                 faithfulness_texts=20, weights=weights)
    shutil.rmtree(cfg.run_dir, ignore_errors=True)  # every check measures afresh
    if from_run is not None:
        shutil.copytree(from_run, cfg.run_dir)
        Run(cfg.run_dir, cfg).invalidate_from("extract")  # the same texts and fine-tuned weights
    return build(cfg, stages=STAGES)


def tokens_of(run) -> int:
    """Tokens the extraction's forward processed: every text, truncated to max_length."""
    bb = run.backbone
    enc, _ = bb.tokenize(run.texts["text"].tolist())
    return int(enc["attention_mask"].sum())


def latency(run, device: str, n: int = 30, words: int = 40) -> dict:
    """The explainer's time per 40-word input on `device` (VQLC only), after one warm-up call."""
    from latency import inputs_of_length  # beside this script
    from vqlc_core.pipeline.run import Run

    os.environ["VQLC_DEVICE"] = device
    again = Run(run.dir)
    ex = again.explainer(["vqlc"])
    sentences = again.texts[again.texts["split"] == "test"]["text"].tolist()
    ex.explain(sentences[0])
    times = []
    for text in inputs_of_length(sentences, words, n):
        t0 = time.perf_counter()
        ex.explain(text)
        times.append((time.perf_counter() - t0) * 1000)
    return {"words": words, "n": n, "p50_ms": round(float(np.percentile(times, 50)), 1),
            "p95_ms": round(float(np.percentile(times, 95)), 1)}


def facts(run) -> dict:
    st = run.manifest.data["stages"]
    tokens = tokens_of(run)
    return {"stages_s": {s: st[s].get("wall_s") for s in STAGES if s in st},
            "extract_s": st["extract"].get("extract_s"), "tokens": tokens,
            "extract_tokens_per_s": round(tokens / st["extract"]["extract_s"], 1) if st["extract"].get("extract_s") else None,
            "vqlc_fit_s": st["vqlc"].get("fit_time_s"), "weights": st["extract"].get("weights"),
            "test_accuracy": st["classifier"].get("accuracy", {}).get("test")}


def agreement(a, b) -> dict:
    """How the device's run and the CPU's agree: stored states and VQLC's assignments."""
    from vqlc_core.methods.metrics import assignment_ami

    rows = np.arange(a.store.n_rows)
    va, vb = a.store.read(rows).astype(np.float32), b.store.read(rows).astype(np.float32)
    scale = float(np.abs(vb).max())
    diff = np.abs(va - vb)
    assign_a, assign_b = a.concepts("vqlc").assignments, b.concepts("vqlc").assignments
    return {"rows": int(len(rows)), "states_max_abs_diff": float(diff.max()),
            "states_max_rel_diff": float(diff.max() / scale) if scale else 0.0,
            "states_median_rel_diff": float(np.median(diff / (np.abs(vb) + 1e-3))),
            "within_fp16_tolerance": bool(np.allclose(va, vb, rtol=2e-2, atol=2e-2 * scale)),
            "vqlc_assignment_agreement": float((assign_a == assign_b).mean()),
            # code numbers are arbitrary (the seeded draws differ between a CUDA and a CPU
            # generator), so the agreement that counts is the partition's: AMI, 1 = the same
            "vqlc_assignment_ami": assignment_ami(assign_a, assign_b)}


def write_result(text: str, out: str | Path) -> None:
    """The result into `out` and, on a lent device machine ($OUT set), into $OUT under the same
    name, so that it comes back; and printed. A JSON result goes through `results_io.write_result`,
    which records its commit, date, machine and command."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        from results_io import write_result as write_json

        write_json(out, json.loads(text))
    else:
        out.write_text(text)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], out.name).write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="the device checked (default: cuda; cpu for a dry run)")
    ap.add_argument("--model", default="auto", help="--model to build with (default: SmolLM2-135M, or a "
                                                    "random-weight SmolLM2-shaped model where it is not here)")
    ap.add_argument("--texts", type=int, default=800, help="MR sentences (default: 800)")
    ap.add_argument("--finetune-steps", type=int, default=30, help="fine-tuning steps at most (default: 30)")
    ap.add_argument("--concepts", type=int, default=100, help="VQLC's concepts (default: 100)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_check.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the stages' progress, as `vqlc build` logs it
    import torch

    from vqlc_core.base.hardware import resolve_device

    device = resolve_device(args.device)
    cache = ROOT / "cache" / "gpu_check"
    model, random_weights = model_source(args.model)
    t0 = time.perf_counter()
    dev = build_on(device, "on-device", args, model, cache)
    out = {"device": device, "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
           "torch": torch.__version__, "model": model, "random_weights": random_weights, "texts": args.texts,
           "finetune_max_steps": args.finetune_steps, "n_concepts": args.concepts,
           "on_device": facts(dev), "explain_40_words_on_device": latency(dev, device)}
    cpu = build_on("cpu", "on-cpu", args, model, cache, from_run=dev.dir)
    out["on_cpu"] = facts(cpu)
    out["agreement"] = agreement(dev, cpu)
    d, c = out["on_device"], out["on_cpu"]
    out["speedup"] = {"extract": round(d["extract_tokens_per_s"] / c["extract_tokens_per_s"], 2)
                      if d["extract_tokens_per_s"] and c["extract_tokens_per_s"] else None,
                      "vqlc_fit": round(c["vqlc_fit_s"] / d["vqlc_fit_s"], 2) if d["vqlc_fit_s"] else None}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    write_result(json.dumps(out, indent=1) + "\n", args.out)


if __name__ == "__main__":
    main()
