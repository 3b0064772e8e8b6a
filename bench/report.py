"""Assemble docs/benchmarks.md from the results the benchmark scripts wrote to bench/results/.

Each section explains one script, gives the exact command, embeds its Markdown table and plot,
and states each goal as met or not with the measured ratio. Usage: python bench/report.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def load(name: str):
    p = RES / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def table(name: str) -> str:
    p = RES / f"{name}.md"
    return p.read_text() if p.exists() else "_not run yet_\n"


def verdict(ok: bool | None) -> str:
    return "**met**" if ok else ("**not met**" if ok is not None else "**not measured**")


def scale_goals(rows) -> list[str]:
    out = []
    if not rows:
        return ["- Scale goals: not measured yet."]
    ok = {(r["method"], r["n_rows"]): r for r in rows if r["status"] == "ok"}
    v100, v1m = ok.get(("vqlc", 100_000)), ok.get(("vqlc", 1_000_000))
    if v100 and v1m:
        ratio = v1m["peak_rss_mb"] / v100["peak_rss_mb"]
        out.append(f"- VQLC peak RSS at 1M rows ≤ 1.15× its value at 100k: {verdict(ratio <= 1.15)} "
                   f"({v1m['peak_rss_mb']:.0f} MB / {v100['peak_rss_mb']:.0f} MB = {ratio:.3f}×).")
    else:
        out.append("- VQLC peak RSS 1M vs 100k: not measured.")
    both = sorted(n for (m, n) in ok if m == "kmeans" and ("vqlc", n) in ok)
    if both:
        parts = [f"{n:,}: {ok[('vqlc', n)]['fit_s'] / ok[('kmeans', n)]['fit_s']:.2f}×" for n in both]
        met = all(ok[("vqlc", n)]["fit_s"] <= ok[("kmeans", n)]["fit_s"] for n in both)
        out.append(f"- VQLC fit time ≤ KMeans at every N where both ran: {verdict(met)} "
                   f"(VQLC time / KMeans time at {', '.join(parts)}).")
    return out


def extraction_goal(rows) -> str:
    if not rows:
        return "- Extraction ≥ 2× the naive loop in fp32: not measured yet."
    out = []
    for model in sorted({r["model"] for r in rows}):
        s = next((r for r in rows if r["model"] == model and r["variant"] == "store fp32"), None)
        if s:
            out.append(f"{model} {s['speedup_vs_naive_fp32']:.2f}× (mean cosine {s['mean_cosine']:.5f})")
    first = next(r for r in rows if r["variant"] == "store fp32")
    return (f"- Extraction ≥ 2× the naive loop at equal fidelity in fp32: "
            f"{verdict(all(r['speedup_vs_naive_fp32'] >= 2 for r in rows if r['variant'] == 'store fp32'))} "
            f"({'; '.join(out)}). {'' if first else ''}")


def latency_goal(rows) -> str:
    if not rows:
        return "- Explain p95 ≤ 300 ms for 40 words on the default preset: not measured yet."
    r = next((r for r in rows if r["run"] == "default" and r["words"] == 40 and r["what"] == "explain"), None)
    if r is None:
        return "- Explain p95 ≤ 300 ms for 40 words on the default preset: not measured."
    return (f"- Explain p95 ≤ 300 ms for 40 words on the default preset: {verdict(r['p95_ms'] <= 300)} "
            f"(p95 {r['p95_ms']} ms, p50 {r['p50_ms']} ms, {r['p95_ms'] / 300:.2f}× the goal).")


def main() -> None:
    notes_path = RES / "notes.md"
    notes = notes_path.read_text() if notes_path.exists() else ""
    eff = load("train_efficiency")
    parts = [
        "# Benchmarks",
        "",
        "Produced by the scripts under `bench/` on this project's 2-core CPU machine (no GPU); every "
        "figure below is copied from `bench/results/` by `python bench/report.py`. Machines here are "
        "shared and noisy: the scripts report medians, and comparisons are measured side by side in "
        "one run. Goals are reported here, never asserted in tests.",
        "",
        "## Goals",
        "",
        *scale_goals(load("scale")),
        extraction_goal(load("extraction")),
        latency_goal(load("latency")),
        (f"- Training efficiency (no goal set): VQLC training achieves {eff['achieved_gflops']} GFLOP/s, "
         f"{eff['fraction_of_train_shape_matmul']:.0%} of an fp32 matmul of its own shapes and "
         f"{eff['fraction_of_square_matmul']:.0%} of a large square matmul."
         if eff else "- Training efficiency: not measured yet."),
        "",
        "## 1. Memory and time as the corpus grows",
        "",
        "`python bench/scale.py` — stores of 10k … 1M rows of d = 384 (the real MiniLM rows of the "
        "default run, then the same rows repeated with seeded noise of 1% of each dimension's std, on "
        "disk). Each fit runs in a fresh process; peak RSS is that process's high-water mark `VmHWM` (it includes "
        "the ~300 MB of the Python + torch + scikit-learn runtime). VQLC: K = 400, default epochs "
        "(enough for 1,000 steps of 256 rows, at least one pass); KMeans: scikit-learn, k-means++, "
        "n_init = 1; MiniBatchKMeans: streamed `partial_fit`; LACOAT: Ward, refused above its memory "
        "budget (half the available memory), with the estimate recorded.",
        "",
        table("scale"),
        "![scale](../bench/results/scale.png)",
        "",
        "## 2. Extraction speed",
        "",
        "`python bench/extraction.py` — tokens per second of the activation store (length-sorted "
        "batches, stops at layer l, writes float16 shards and the token table) against a naive loop "
        "(dataset-order batches, full forward with `output_hidden_states=True`), fp32 and bf16 "
        "autocast, MiniLM and SmolLM2 at their second-to-last layer; cosine of every word row to the "
        "naive fp32 row.",
        "",
        table("extraction"),
        "![extraction](../bench/results/extraction.png)",
        "",
        "## 3. Interactive latency",
        "",
        "`python bench/latency.py --runs default decoder` — server-side `Explainer.explain` (all three "
        "methods, Integrated Gradients with the run's steps) and one ablation toggle "
        "(`ablate` of VQLC's prediction concept), 50 inputs per length, one torch thread as "
        "the dashboard uses.",
        "",
        table("latency"),
        "![latency](../bench/results/latency.png)",
        "",
        "## 4. Training efficiency",
        "",
        "`python bench/train_efficiency.py` — FLOPs of a whole VQLC fit counted by "
        "`torch.utils.flop_counter.FlopCounterMode`, divided by the median wall time of the same fit, "
        "against fp32 matmul rates measured in the same process.",
        "",
        table("train_efficiency"),
        "![training efficiency](../bench/results/train_efficiency.png)",
        "",
        "## Other measurements",
        "",
        "- `python bench/extract_memory.py` — peak RSS of extraction for 1,000 and 4,000 MR texts.",
        "- `python bench/distributed.py` — 1 against 2 torchrun processes.",
        "- `python bench/many_users.py` — 10 browser sessions against one server.",
        "",
        notes,
    ]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(parts).rstrip() + "\n")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    sys.exit(main())
