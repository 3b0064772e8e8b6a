"""First load of each dashboard page: a fresh server per page (so nothing is cached in it), started
as the project serves it (`dashboard_server.serve`: `python -m vqlc_ui.serve`, or `streamlit run
app.py` for a checkout without it); one chromium page at 1400x900, the time from asking for the
page's URL to a settled page: its title shown, the script finished, no stale element, no skeleton, no spinner
and every image loaded. A second visit in a new session of the same server is timed as well.

    .venv/bin/python bench/first_load.py --run-dir cache/runs/default   # writes bench/results/first_load.json

The run should be a full build of the default preset (MiniLM on MR, K = 400), the one a new
user opens first. The machine's other load is reported with the times. On a shared machine,
compare two versions under the same load: `--baseline` serves another checkout in turn with this
one, page by page, each visit on a fresh server, and `--repeats` gives medians:

    git archive HEAD | tar -x -C /tmp/before   # e.g. the last commit
    .venv/bin/python bench/first_load.py --baseline /tmp/before --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from dashboard_server import ARGS, CHROMIUM, launcher, serve  # noqa: E402
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

RESULTS = ROOT / "bench" / "results" / "first_load.json"
# page path -> the start of its title (a page whose title names the method ends in it)
PAGES = {"": "Concepts: ", "codebook_map": "Codebook map: ", "explain": "Explain a prediction",
         "compare": "Compare concept methods", "case_study": "Case study", "build": "Build a run"}
SETTLED = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (app?.dataset.testScriptState !== 'notRunning') return false;
    if (document.querySelector('[data-stale="true"], [data-testid^="stSkeleton"], [data-testid="stAppSkeleton"], '
                               + '[data-testid="stSpinner"]')) return false;
    return [...document.querySelectorAll('[data-testid="stMain"] img')].every(i => i.complete && i.naturalWidth > 0);
}"""


def settle_time(browser, url: str, title: str, timeout_ms: int = 120_000) -> float:
    """Seconds from asking for `url` to a settled page whose title starts with `title`."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        t0 = time.perf_counter()
        page.goto(url)
        page.locator("h1").filter(has_text=title).first.wait_for(timeout=timeout_ms)
        # A page that settles for a moment between two runs is not settled: ask twice, 200 ms apart.
        while True:
            page.wait_for_function(SETTLED, timeout=timeout_ms)
            t = time.perf_counter() - t0
            page.wait_for_timeout(200)
            if page.evaluate(SETTLED):
                return t
    finally:
        context.close()


def visit(browser, run_dir: Path, path: str, app_root: Path = ROOT) -> tuple[float, float, float]:
    """(first load, second visit, load average) of page `path` on a fresh server of `app_root`."""
    with serve(run_dir, app_root=app_root) as (base, _):
        load = os.getloadavg()[0]
        first = settle_time(browser, f"{base}/{path}", PAGES[path])
        again = settle_time(browser, f"{base}/{path}", PAGES[path])
    return first, again, load


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, default=ROOT / "cache" / "runs" / "default",
                    help="a built run (default: cache/runs/default)")
    ap.add_argument("--pages", nargs="+", default=list(PAGES), help="page paths ('' is Concepts)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--baseline", type=Path, help="another checkout served in turn with this one (same load)")
    ap.add_argument("--repeats", type=int, default=1, help="visits of each page per version; medians are kept")
    args = ap.parse_args()
    if not (args.run_dir / "manifest.json").exists():
        raise SystemExit(f"No run in {args.run_dir}; build it with `vqlc build` or pass --run-dir.")
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        versions = {"": ROOT, **({"baseline_": args.baseline.resolve()} if args.baseline else {})}
        for path in args.pages:
            got = {v: [] for v in versions}
            for _ in range(args.repeats):  # the versions alternate, so each sees the same load
                for v, root in versions.items():
                    got[v].append(visit(browser, args.run_dir, path, root))
            row = {"page": path or "concepts"}
            for v, times in got.items():
                first, again, load = (statistics.median(x) for x in zip(*times))
                row.update({f"{v}first_s": round(first, 2), f"{v}second_visit_s": round(again, 2),
                            f"{v}load_average_1min": round(load, 2),
                            f"{v}first_all_s": [round(t[0], 2) for t in times]})
                print(f"{row['page']:>13}{' (baseline)' if v else ''}: first load {first:5.2f} s, second visit "
                      f"{again:5.2f} s (load average {load:.1f})", flush=True)
            if args.baseline:
                row["first_ratio"] = round(row["first_s"] / row["baseline_first_s"], 2)
            rows.append(row)
        browser.close()
    out = {"run": args.run_dir.resolve().name, "viewport": "1400x900", "cpus": os.cpu_count(),
           "repeats": args.repeats, "served_with": {v or "current": " ".join(launcher(r)) for v, r in versions.items()},
           **({"baseline": str(args.baseline)} if args.baseline else {}), "pages": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
