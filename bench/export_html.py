"""The standalone HTML export of a built run at full size: its size, how long writing it takes, and
how long chromium takes to open it from disk with the network blocked (the goal: under 15 MB and
under 3 s for the default run's 400 concepts of one method).

    .venv/bin/python bench/export_html.py --run default --method vqlc   # writes bench/results/export_html.json

The file goes to a temporary folder; nothing is written to the run. Opening is timed three times,
each in a fresh browser context: the load event, first contentful paint, and the grid's clouds
decoded (every data URI in the grid turned into pixels).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from dashboard_server import ARGS, CHROMIUM  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "export_html.json"
DECODED = """async () => Promise.all([...document.querySelectorAll('.grid .cloud')].map(d => {
    const im = new Image(); im.src = getComputedStyle(d).backgroundImage.slice(5, -2); return im.decode();
})).then(all => all.length)"""


def open_times(path: Path, repeats: int = 3) -> list[dict]:
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        for _ in range(repeats):
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
            page = context.new_page()
            t0 = time.perf_counter()
            page.goto(path.as_uri(), wait_until="load")
            load = time.perf_counter() - t0
            clouds = page.evaluate(DECODED)
            decoded = time.perf_counter() - t0
            fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null")
            out.append({"load_s": round(load, 3), "first_contentful_paint_s": round(fcp / 1000, 3) if fcp else None,
                        "clouds_decoded_s": round(decoded, 3), "clouds": clouds})
            context.close()
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="the run's name under cache/runs/ (default: default)")
    ap.add_argument("--method", default="vqlc", help="the concept method to export (default: vqlc)")
    args = ap.parse_args()

    from vqlc_core.views import export_html
    from vqlc_core.build.run import Run

    run = Run(ROOT / "cache" / "runs" / args.run)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = export_html.write(run, args.method, Path(tmp) / "export.html")
        export_s = time.perf_counter() - t0
        html = path.read_text()
        result = {"run": args.run, "method": args.method, "concepts": html.count("<a class=card "),
                  "bytes": path.stat().st_size, "mb": round(path.stat().st_size / 1e6, 2),
                  "export_s": round(export_s, 1), "open": open_times(path)}
    print(json.dumps(result, indent=2))
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
