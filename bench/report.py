"""Assemble docs/benchmarks.md, the whole page, from what the benchmark scripts stored in bench/results/.

Each section explains one script, gives the exact command, embeds its Markdown table and plot,
and states each goal as met or not with the measured ratio. Prose that a script does not write
(how a measurement was made, what it means) is stored beside its results as
`bench/results/<name>.notes.md` and copied in; the plots are copied to docs/bench/ so the site
can show them. Nothing on the page is written by hand: tests/test_docs.py rebuilds it and fails
on any difference. Usage: python bench/report.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
PLOTS = ROOT / "docs" / "bench"


def load(name: str):
    p = RES / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def table(name: str) -> str:
    p = RES / f"{name}.md"
    return p.read_text() if p.exists() else "_not run yet_\n"


def notes(name: str) -> str:
    """The stored prose of a section (bench/results/<name>.notes.md), with `{table:X}` and `{plot:X}`
    replaced by that result's table and plot; '' when there is none."""
    p = RES / f"{name}.notes.md"
    if not p.exists():
        return ""
    text = p.read_text()
    for stem in sorted({m for m in _marks(text, "table")}):
        text = text.replace("{table:%s}" % stem, table(stem).rstrip("\n"))
    for stem in sorted({m for m in _marks(text, "plot")}):
        text = text.replace("{plot:%s}" % stem, plot(stem))
    return text


def _marks(text: str, kind: str) -> list[str]:
    import re

    return re.findall(r"\{%s:([\w-]+)\}" % kind, text)


def plot(stem: str) -> str:
    """The Markdown image of a stored plot, the file as docs/bench/<stem>.png (see plots())."""
    return f"![{stem.replace('_', ' ')}](bench/{stem}.png)"


def plots() -> dict[Path, bytes]:
    """The plots the page shows, as the files they are copied to under docs/bench/."""
    return {PLOTS / p.name: p.read_bytes() for p in sorted(RES.glob("*.png"))
            if p.stem in ("scale", "extraction", "latency", "train_efficiency", "time_to_quality")}


BUILDS = ("fp32", "onepass", "attribution", "after", "before")  # newest first: the labels the table shows


def build_time(builds) -> list[str]:
    """The default build's stage times (the newest first, then the earlier builds back to the one
    of 1 December), from bench/results/default_build.json, and the goals of 5 and 4 minutes of stages."""
    if not builds:
        return ["_not measured yet_"]
    out = ["| build | command | stages | fine-tuning | evaluation | test accuracy | when and where |",
           "|---|---|---:|---:|---:|---:|---|"]
    for key in BUILDS:
        b = builds.get(key)
        if b:
            s = b["stages_s"]
            acc = f"{b['test_accuracy']:.3f}" if b.get("test_accuracy") is not None else ""
            out.append(f"| {key} | `{b['command']}` | {b['all_stages_s']:.1f} s | {s.get('finetune', 0):.0f} s | "
                       f"{s.get('evaluate', 0):.0f} s | {acc} | {b.get('note', '')} |")
    latest = next((builds[k] for k in BUILDS if k in builds), None)
    if latest:
        out += ["", f"- The default build within 5 minutes of stages on a quiet machine: "
                    f"{verdict(latest['all_stages_s'] <= 300)} ({latest['all_stages_s']:.1f} s, the first row).",
                f"- The default build within 4 minutes of stages on a quiet machine, test accuracy 0.800: "
                f"{verdict(latest['all_stages_s'] <= 240 and latest.get('test_accuracy') == 0.8)} "
                f"({latest['all_stages_s']:.1f} s, test accuracy {latest.get('test_accuracy')})."]
    return out


def imports_line(rows) -> str:
    if not rows:
        return "- `python bench/imports.py --baseline OTHER_CHECKOUT`: not measured yet."
    got = {(r["checkout"], r["command"]): r for r in rows}
    parts = []
    for cmd in ("vqlc --help", "import vqlc_core"):
        this, base = got.get(("this", cmd)), got.get(("baseline", cmd))
        if this and base:
            parts.append(f"`{cmd}` {base['median_s']} s → {this['median_s']} s")
    return ("- `python bench/imports.py --baseline OTHER_CHECKOUT` — `import vqlc_core` and `vqlc --help` in fresh "
            "processes, medians of 5, this checkout beside a baseline one (`bench/results/imports.json`): "
            + "; ".join(parts) + ". The command line parses with the settings alone and imports a command's code "
            "when it runs, so `--help` loads no torch.")


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
    at40 = [r for r in rows if r["run"] == "default" and r["words"] == 40]
    # the Explain page asks for the attribution of the method it shows ("explain page"), where measured
    r = next((r for what in ("explain page", "explain") for r in at40 if r["what"] == what), None)
    if r is None:
        return "- Explain p95 ≤ 300 ms for 40 words on the default preset: not measured."
    return (f"- Explain p95 ≤ 300 ms for 40 words on the default preset: {verdict(r['p95_ms'] <= 300)} "
            f"(p95 {r['p95_ms']} ms, p50 {r['p50_ms']} ms, {r['p95_ms'] / 300:.2f}× the goal).")


def first_load_table(result) -> list[str]:
    """`bench/first_load.py`'s pages: each page's first load with the server warm (median), this
    checkout beside the baseline it was measured with, the load average and what the browser held."""
    if not result:
        return ["_not run yet_"]
    base = "baseline_first_s" in result["pages"][0]
    rows = ["| page | first load (s) | " + ("before (s) | " if base else "") + "load average | JavaScript (MB) | "
            "DOM nodes | plotly charts | page height (px) |",
            "|---|---:|" + ("---:|" if base else "") + "---:|---:|---:|---:|---:|"]
    for r in result["pages"]:
        w = r.get("weight", {})
        js = f"{w['js_bytes'] / 1e6:.1f}" if "js_bytes" in w else ""
        rows.append(f"| {r['page']} | {r['first_s']:.2f} | " + (f"{r['baseline_first_s']:.2f} | " if base else "")
                    + f"{r['load_average_1min']:.1f} | {js} | {w.get('dom_nodes', '')} | {w.get('plotly_charts', '')} | "
                      f"{w.get('page_height_px', '')} |")
    return rows


def page() -> str:
    """The whole of docs/benchmarks.md, from bench/results/."""
    missed = RES / "notes.md"
    missed = missed.read_text() if missed.exists() else ""
    eff = load("train_efficiency")
    parts = [
        "# Benchmarks",
        "",
        "<!-- generated by `python bench/report.py` from bench/results/; edit the results or their "
        ".notes.md files, not this page -->",
        "",
        "Produced by the scripts under `bench/` on a shared 2-core CPU machine (no GPU) unless a section "
        "says otherwise; every figure below is copied from `bench/results/` by `python bench/report.py`. "
        "The machine is shared and noisy: the scripts report medians, and comparisons are measured side "
        "by side in one run. Goals are reported here, never asserted in tests. Each result file written "
        "since 4 December records its commit, date, machine and command (`bench/results_io.py`).",
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
        "## Build time",
        "",
        "The default preset's build, stage by stage (`bench/build_times.py` reads a built run's manifest; "
        "`bench/results/default_build.json`). Models and data were already in `cache/`.",
        "",
        *build_time(load("default_build")),
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
        plot("scale"),
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
        plot("extraction"),
        "",
        "## 3. Interactive latency",
        "",
        "`python bench/latency.py --runs default decoder` — server-side `Explainer.explain` (all three "
        "methods, Integrated Gradients with the run's steps) with the concept attribution of every method "
        "(\"explain\", as Compare asks) and of VQLC alone (\"explain page\", as the Explain page asks), "
        "each from scratch, and one ablation toggle (`ablate` of VQLC's prediction concept), 50 inputs "
        "per length, one torch thread as the dashboard uses. " + notes("latency").strip(),
        "",
        table("latency"),
        plot("latency"),
        "",
        "## 4. Training efficiency",
        "",
        "`python bench/train_efficiency.py` — FLOPs of a whole VQLC fit counted by "
        "`torch.utils.flop_counter.FlopCounterMode`, divided by the median wall time of the same fit, "
        "against fp32 matmul rates measured in the same process.",
        "",
        table("train_efficiency"),
        plot("train_efficiency"),
        "",
        "## 5. Many users on one server",
        "",
        notes("many_users"),
        "## 6. Time to quality",
        "",
        notes("time_to_quality"),
        "## 7. First load of each page",
        "",
        notes("first_load").strip(),
        "",
        *first_load_table(load("first_load")),
        "",
        "## Other measurements",
        "",
        notes("other").rstrip("\n"),
        imports_line(load("imports")),
        "",
        missed,
    ]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    want = {DOC: page().encode(), **plots()}
    stale = [p for p, data in want.items() if not p.exists() or p.read_bytes() != data]
    if check:
        for p in stale:
            name = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
            print(f"{name} differs from bench/results/; run `python bench/report.py`.", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(want[p])
    print(f"wrote {DOC}" if stale else f"{DOC} is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
