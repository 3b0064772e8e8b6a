"""Interactive latency: server-side Explain and one ablation toggle, as the dashboard calls them.

For each built run (default: the `default` and `decoder` runs) and each input length (about 10,
40 and 200 words, made from the run's test sentences), 50 distinct inputs are explained with
all of the run's methods and their concept attributions ("explain", as Compare asks), again with
the attribution of VQLC alone ("explain page", as the Explain page asks), each from scratch,
then the prediction concept of VQLC is ablated (one toggle).
Reports p50 and p95 in milliseconds. Usage: python bench/latency.py [--runs default decoder]
Writes bench/results/latency.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def inputs_of_length(sentences: list[str], words: int, n: int) -> list[str]:
    """n distinct inputs of about `words` words, made by joining consecutive sentences."""
    out, i = [], 0
    flat = [w for s in sentences for w in s.split()]
    while len(out) < n:
        start = (i * 7919) % max(1, len(flat) - words)
        out.append(" ".join(flat[start : start + words]))
        i += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["default", "decoder"], help="built runs under cache/runs/")
    ap.add_argument("--lengths", type=int, nargs="+", default=[10, 40, 200], help="words per input")
    ap.add_argument("--n", type=int, default=50, help="inputs per length")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the dashboard uses 1)")
    a = ap.parse_args()
    import numpy as np
    import torch

    from vqlc_core.pipeline.run import Run

    torch.set_num_threads(a.threads)
    results = []
    for name in a.runs:
        run_dir = ROOT / "cache" / "runs" / name
        if not (run_dir / "manifest.json").exists():
            print(f"skipping run '{name}': not built")
            continue
        run = Run(run_dir)
        methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
        ex = run.explainer(methods)
        texts = run.texts
        sentences = texts[texts["split"] == "test"]["text"].tolist()
        ex.explain(sentences[0])  # warm-up: first-call allocations
        for words in a.lengths:
            t_explain, t_page, t_toggle = [], [], []
            m = "vqlc" if "vqlc" in methods else next(iter(methods))
            for text in inputs_of_length(sentences, words, a.n):
                ex._cache.clear()  # each call from scratch: its forward pass is not reused
                t0 = time.perf_counter()
                ex.explain(text)
                t_explain.append((time.perf_counter() - t0) * 1000)
                ex._cache.clear()
                t0 = time.perf_counter()
                e = ex.explain(text, attribute=[m])
                t_page.append((time.perf_counter() - t0) * 1000)
                k = e.methods[m].prediction_concepts[0].concept
                t0 = time.perf_counter()
                ex.ablate(text, m, [k])
                t_toggle.append((time.perf_counter() - t0) * 1000)
            # explain: every method's attribution (Compare); explain page: the shown method's (Explain)
            for what, t in (("explain", t_explain), ("explain page", t_page), ("toggle", t_toggle)):
                results.append({"run": name, "model": run.cfg.extract.model, "words": words, "what": what, "n": len(t),
                                "p50_ms": round(float(np.percentile(t, 50)), 1),
                                "p95_ms": round(float(np.percentile(t, 95)), 1)})
                print(json.dumps(results[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "latency.json", results, indent=2)
    lines = ["| run | model | words | call | p50 (ms) | p95 (ms) |", "|---|---|---:|---|---:|---:|"]
    lines += [f"| {r['run']} | {r['model']} | {r['words']} | {r['what']} | {r['p50_ms']} | {r['p95_ms']} |"
              for r in results]
    (RESULTS / "latency.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for (run, what) in sorted({(r["run"], r["what"]) for r in results}):
        rs = [r for r in results if r["run"] == run and r["what"] == what]
        ax.plot([r["words"] for r in rs], [r["p95_ms"] for r in rs], "o-", label=f"{run} {what} p95")
    ax.axhline(300, color="grey", ls="--", lw=1)
    ax.set_xscale("log"), ax.set_xlabel("words per input"), ax.set_ylabel("ms"), ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "latency.png", dpi=110)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
