"""Screenshots of the Explain and Compare pages for a few sentences, through Debian's chromium, for
the README and a closing note: one PNG per (run, page, sentence) under --out.

Serve the dashboard first (e.g. `.venv/bin/python -m vqlc_ui.serve --server.port 8765
--server.headless true`), then: python bench/screenshots.py --runs default-before default
[--url http://127.0.0.1:8765] [--out docs/screenshots]. The sentences are a positive, a negative
and a mixed one; each page is opened from its link (`?run=...&text=...`) and shot full length.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from urllib.parse import urlencode

SENTENCES = {
    "positive": "a gorgeous, witty and deeply moving film that earns every one of its tears .",
    "negative": "a dull, lifeless and badly acted mess that drags on far too long .",
    "mixed": "a gorgeous, witty and deeply moving film, though its final act drags on far too long .",
}
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=["default"], help="runs to show (names under the server's cache)")
    ap.add_argument("--url", default="http://127.0.0.1:8765", help="the dashboard's address")
    ap.add_argument("--out", default="docs/screenshots", help="folder for the PNG files")
    ap.add_argument("--pages", nargs="+", default=["explain", "compare"], help="pages to shoot")
    ap.add_argument("--height", type=int, default=2000, help="the window's height in pixels (Streamlit scrolls "
                    "inside the page, so this is how much of it a shot shows)")
    ap.add_argument("--method", default="vqlc", help="the Explain page's method (default: vqlc)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": args.height})
        for run in args.runs:
            for name in args.pages:
                for kind, text in SENTENCES.items():
                    page.goto(f"{args.url}/{name}?" + urlencode({"run": run, "method": args.method, "text": text}))
                    page.wait_for_selector('[data-testid="stHtml"] .vqlc-sentence', timeout=120_000)
                    deadline = time.time() + 120
                    while time.time() < deadline and page.locator('[data-testid="stStatusWidget"]').count():
                        time.sleep(0.5)  # Streamlit is still running the page
                    time.sleep(2.0)
                    path = out / f"{run}-{name}-{kind}.png"
                    page.screenshot(path=str(path), full_page=True)
                    print(path, flush=True)
        browser.close()


if __name__ == "__main__":
    main()
