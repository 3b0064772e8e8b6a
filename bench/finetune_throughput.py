"""Fine-tuning cost: vqlc's training step against a plain transformers loop, and its time estimate
against the time a run then takes.

Throughput: examples/s of `tuning.train_step` (length-bucketed batches, the build's settings:
full fine-tuning, batch 32, the default precision: bf16 autocast where the CPU has bf16 natively,
else fp32) against what a researcher writes first with
transformers (AutoModel + a linear head on the mean-pooled last layer, batches in random order
padded to their longest text, the same optimizer, dtype and batch size), on the same MR train
texts, one thread, interleaved, `--repeats` times; medians. Each variant trains a fresh model
for `--steps` steps.

Estimate: `finetune` with `--finetune-max-steps` (`--est-steps`) on the default run's texts, and
optionally on a larger set (`--big`: 10,000 sentences of the `movies` reviews, 8,023 of them
train): the estimate it logged after its first steps against the seconds the run took, and what
its timed rate gives for the whole default fine-tuning of that set.

Usage: python bench/finetune_throughput.py [--steps 20] [--repeats 3] [--est-steps 40] [--big]
Writes bench/results/finetune_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from vqlc_core.base.hardware import resolve_dtype
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CACHE = ROOT / "cache"
DTYPE = resolve_dtype("auto")  # the build's default precision on this machine: bf16 only where it is native


def mr(limit: int | None, dataset: str = "mr"):
    import numpy as np
    import pandas as pd

    from vqlc_core.data.datasets import load_dataset, split_dataset

    ds = load_dataset(dataset, cache_dir=CACHE, limit=limit, seed=0)
    split = split_dataset(ds.labels, ds.groups, seed=0)
    return pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels, "split": split})


def backbone():
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.models import resolve_model

    return Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=256)


def ours(texts: list[str], labels, steps: int, batch: int) -> float:
    """Seconds for `steps` of vqlc's training step on length-bucketed batches."""
    import numpy as np
    import torch
    from torch import nn

    from vqlc_core.data.settings import FinetunePlan
    from vqlc_core.data.tuning import bucketed_batches, train_step

    torch.manual_seed(0)
    bb = backbone()
    plan = FinetunePlan("full", 1, batch, None, 8, 0, DTYPE, False, 0, 0)
    head = nn.Linear(bb.hidden_size, 2)
    bb.model.requires_grad_(True)
    params = [*bb.model.parameters(), *head.parameters()]
    opt = torch.optim.AdamW([{"params": params, "peak_lr": 3e-5}])
    y = torch.as_tensor(labels, dtype=torch.long)
    batches = bucketed_batches(np.asarray([len(t) for t in texts]), batch, np.random.default_rng(0))[:steps]
    t0 = time.perf_counter()
    for idx in batches:
        train_step(bb, head, opt, [texts[i] for i in idx], y[idx], 1.0, plan)
    return time.perf_counter() - t0


def plain(texts: list[str], labels, steps: int, batch: int) -> float:
    """Seconds for `steps` of a plain transformers loop: random batches padded to their longest."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
    from transformers import AutoModel, AutoTokenizer

    from vqlc_core.data.models import resolve_model

    torch.manual_seed(0)
    path = resolve_model("minilm", cache_dir=CACHE).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path)
    head = nn.Linear(model.config.hidden_size, 2)
    opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=3e-5)
    y = torch.as_tensor(labels, dtype=torch.long)
    order = np.random.default_rng(0).permutation(len(texts))
    model.train()
    t0 = time.perf_counter()
    for s in range(steps):
        idx = order[s * batch : (s + 1) * batch]
        enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=DTYPE == "bfloat16"):
            h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        loss = F.cross_entropy(head((h.float() * m).sum(1) / m.sum(1)), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def estimate_vs_measured(df, steps: int | None) -> dict:
    """`finetune` capped at `steps`: its logged estimate against the seconds it took."""
    from vqlc_core.data.settings import FinetuneConfig
    from vqlc_core.data.finetune import finetune

    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    logger = logging.getLogger("vqlc_core.data.finetune")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory() as d:
            cfg = FinetuneConfig(finetune_max_steps=steps, finetune_patience=0)
            _, info = finetune(backbone(), df, ["negative", "positive"], cfg, Path(d), progress=False)
    finally:
        logger.removeHandler(handler)
    return {"n_train": info["n_train"], "steps": info["steps"], "estimated_s": info["estimated_seconds"],
            "measured_s": info["seconds_this_run"],
            "ratio": round(info["seconds_this_run"] / info["estimated_seconds"], 3),
            "s_per_char": info["timed_s_per_char"],
            "logged": next((r for r in records if r.startswith("fine-tune: about")), None)}


def whole_estimate(df, s_per_char: float) -> dict:
    """The default fine-tuning of `df` (2 epochs) at the time per character a capped run timed."""
    from vqlc_core.data.settings import FinetuneConfig
    from vqlc_core.data.finetune import DEV_SHARE

    plan = FinetuneConfig().plan("full", 0)
    train, dev = df[df["split"] == "train"]["text"], df[df["split"] == "dev"]["text"]
    steps = plan.epochs * -(-len(train) // plan.batch_size)
    seconds = s_per_char * plan.epochs * (train.str.len().sum() + DEV_SHARE * dev.str.len().sum())
    return {"steps": int(steps), "estimated_s": round(float(seconds), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="training steps per throughput measurement")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each variant")
    ap.add_argument("--batch", type=int, default=32, help="texts per step")
    ap.add_argument("--est-steps", type=int, default=40, help="steps of the capped runs whose estimate is checked")
    ap.add_argument("--big", action="store_true", help="also check the estimate on all 10,662 MR sentences")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    df = mr(4000)
    train = df[df["split"] == "train"]
    texts, labels = train["text"].tolist(), train["label"].to_numpy()
    times = {"vqlc": [], "plain transformers": []}
    for _ in range(args.repeats):
        times["vqlc"].append(ours(texts, labels, args.steps, args.batch))
        times["plain transformers"].append(plain(texts, labels, args.steps, args.batch))
    out = {"command": "python bench/finetune_throughput.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if not isinstance(v, bool))
               + (" --big" if args.big else ""),
           "torch_threads": torch.get_num_threads(), "dtype": DTYPE, "steps": args.steps, "batch": args.batch,
           "examples_per_s": {k: round(args.steps * args.batch / statistics.median(v), 2) for k, v in times.items()},
           "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()}}
    out["speedup"] = round(out["examples_per_s"]["vqlc"] / out["examples_per_s"]["plain transformers"], 3)
    capped = estimate_vs_measured(df, args.est_steps)
    out["estimate"] = {"default (4,000 MR texts)": {**capped,
                                                     "whole fine-tuning": whole_estimate(df, capped["s_per_char"])}}
    if args.big:
        big = mr(10000, "movies")  # 10,000 sentences of the Pang & Lee reviews: MR here has 4,000
        capped = estimate_vs_measured(big, args.est_steps)
        out["estimate"]["movies sentences (10,000 texts, --dataset movies --limit 10000)"] = {**capped,
                                                       "whole fine-tuning": whole_estimate(big, capped["s_per_char"])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "finetune_throughput.json", out, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
