"""Extraction speed: the activation store against a naive loop, fp32 and bf16, MiniLM and SmolLM2.

The naive loop is what a researcher writes first: batches in dataset order (unsorted), a full
forward with output_hidden_states=True, then the word rows gathered from layer l. The store
uses length-sorted batches and stops at layer l. Fidelity is the cosine of each word row to
the naive fp32 row. All variants run in one process, interleaved, `--repeats` times; medians.

Usage: python bench/extraction.py [--models minilm smollm2-135m] [--texts 400] [--repeats 3]
Writes bench/results/extraction.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def naive_rows(bb, texts: list[str], layer: int, batch_size: int, dtype=None):
    """Word rows (last sub-word) from a full forward with output_hidden_states, unsorted batches."""
    import numpy as np
    import torch

    from vqlc_core.data.backbone import aggregate_words, autocast

    out = []
    with torch.inference_mode():
        for b in range(0, len(texts), batch_size):
            enc, words = bb.tokenize(texts[b : b + batch_size])
            with autocast(dtype):
                hs = bb.base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                             output_hidden_states=True).hidden_states[layer].float()
            out += [aggregate_words(hs[j], words[j]).numpy() for j in range(len(words))]
    return np.concatenate(out)


def store_rows(bb, texts, layer: int, batch_size: int, dtype: str):
    import numpy as np
    import pandas as pd

    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store

    df = pd.DataFrame({"text_id": np.arange(len(texts)), "text": texts, "label": 0, "split": "train"})
    with tempfile.TemporaryDirectory() as d:
        s = build_store(bb, df, ExtractConfig(layer=layer, batch_size=batch_size, dtype=dtype), Path(d) / "s",
                        progress=False)
        words = (s.tokens["kind"] == "word").to_numpy()
        return s.read_all()[words]


def cosine(a, b):
    import numpy as np

    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["minilm", "smollm2-135m"])
    ap.add_argument("--texts", type=int, default=400, help="MR sentences per measurement")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import numpy as np
    import torch

    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.data.models import resolve_model

    torch.set_num_threads(a.threads)
    texts = load_dataset("mr", cache_dir=ROOT / "cache", limit=a.texts, seed=0).texts
    results = []
    for name in a.models:
        bb = Backbone.from_source(resolve_model(name, cache_dir=ROOT / "cache"), max_length=128)
        layer = bb.n_layers - 1
        n_tokens = int(sum(m.sum() for m in [bb.tokenize([t])[0]["attention_mask"] for t in texts]))
        ref = naive_rows(bb, texts, layer, a.batch_size)
        variants = {
            "naive fp32": lambda: naive_rows(bb, texts, layer, a.batch_size),
            "naive bf16": lambda: naive_rows(bb, texts, layer, a.batch_size, torch.bfloat16),
            "store fp32": lambda: store_rows(bb, texts, layer, a.batch_size, "float32"),
            "store bf16": lambda: store_rows(bb, texts, layer, a.batch_size, "bfloat16"),
        }
        times = {k: [] for k in variants}
        rows = {}
        for _ in range(a.repeats):
            for k, fn in variants.items():
                t0 = time.perf_counter()
                rows[k] = fn()
                times[k].append(time.perf_counter() - t0)
        for k in variants:
            cos = cosine(rows[k], ref)
            med = statistics.median(times[k])
            results.append({"model": name, "layer": layer, "variant": k, "texts": len(texts), "tokens": n_tokens,
                            "median_s": round(med, 3), "tokens_per_s": round(n_tokens / med, 1),
                            "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())})
            print(json.dumps(results[-1]), flush=True)
        base = next(r for r in results if r["model"] == name and r["variant"] == "naive fp32")
        for r in results:
            if r["model"] == name:
                r["speedup_vs_naive_fp32"] = round(r["tokens_per_s"] / base["tokens_per_s"], 2)
        del bb
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "extraction.json", results, indent=2)
    lines = ["| model | variant | tokens/s | × naive fp32 | mean cosine to naive fp32 | min cosine |",
             "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['variant']} | {r['tokens_per_s']:.0f} | {r['speedup_vs_naive_fp32']:.2f} | "
              f"{r['mean_cosine']:.5f} | {r['min_cosine']:.4f} |" for r in results]
    (RESULTS / "extraction.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{r['model']}\n{r['variant']}" for r in results]
    ax.barh(labels, [r["tokens_per_s"] for r in results])
    ax.set_xlabel("tokens per second (median)")
    fig.tight_layout()
    fig.savefig(RESULTS / "extraction.png", dpi=110)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
