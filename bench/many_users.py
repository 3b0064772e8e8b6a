"""Many users on one dashboard: N browser sessions type inputs into the Explain page of one
`streamlit run app.py` server at once, each waiting for its input's prediction before typing the
next. Reports every request answered or not, latency (p50/p95) of one session alone and of N
together, and the server's resident memory with 1 and with N sessions connected.

    .venv/bin/python bench/many_users.py --sessions 10 --seconds 60   # writes bench/results/many_users.json

One chromium (Debian's, through playwright) with one context per session, driven by asyncio.
Every input is new (a numbered word in it), so no cached explanation answers it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
from dashboard_server import ARGS, CHROMIUM, serve  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "many_users.json"
WORDS = ["gorgeous", "dull", "witty", "tedious", "moving", "clumsy", "sharp", "bland", "warm", "cold"]
ANSWER_TIMEOUT_MS = 90_000


class Session:
    """One browser context on the Explain page, typing numbered inputs until told to stop."""

    def __init__(self, browser, base: str, sid: int):
        self.browser, self.base, self.sid = browser, base, sid
        self.latencies: list[float] = []
        self.sent = self.answered = 0
        self.failures: list[str] = []

    async def open(self) -> None:
        from playwright.async_api import expect

        self.context = await self.browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = await self.context.new_page()
        await self.page.goto(f"{self.base}/explain")
        await expect(self.page.get_by_role("heading", name="Explain a prediction")).to_be_visible(timeout=ANSWER_TIMEOUT_MS)

    async def ask(self, i: int) -> None:
        from playwright.async_api import expect

        marker = f"take{self.sid}x{i}"
        text = f"the {WORDS[i % len(WORDS)]} {marker} of this film is {WORDS[(i + self.sid) % len(WORDS)]}"
        box = self.page.locator('[data-testid="stTextArea"] textarea')
        sentence = self.page.locator('[data-testid="stMarkdownContainer"]:has(> p > span[title])')
        await box.fill(text)
        self.sent += 1
        t0 = time.perf_counter()
        await box.press("Control+Enter")
        try:
            await expect(sentence).to_contain_text(marker, timeout=ANSWER_TIMEOUT_MS)
            # the page's first metric is the prediction (an ablation result below also names one)
            pred = self.page.locator('[data-testid="stMetric"]', has_text="Prediction").first
            await expect(pred.locator('[data-testid="stMetricValue"]')).not_to_be_empty(timeout=ANSWER_TIMEOUT_MS)
        except AssertionError as e:
            self.failures.append(f"session {self.sid} input {i}: {str(e).splitlines()[0]}")
            return
        self.latencies.append(time.perf_counter() - t0)
        self.answered += 1

    async def type_until(self, deadline: float) -> None:
        i = 0
        while time.monotonic() < deadline:
            await self.ask(i)
            i += 1


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    a = np.asarray(xs)
    return {"n": len(xs), "p50_s": round(float(np.percentile(a, 50)), 3), "p95_s": round(float(np.percentile(a, 95)), 3),
            "max_s": round(float(a.max()), 3)}


def _rss_mb(proc) -> float:
    p = psutil.Process(proc.pid)
    return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20


async def _bench(base: str, server, n_sessions: int, seconds: float, alone_seconds: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            first = Session(browser, base, 0)
            await first.open()
            await first.ask(10_000)  # the first input waits for the model to load: not counted below
            first.latencies.clear()
            first.sent = first.answered = 0
            await first.type_until(time.monotonic() + alone_seconds)
            alone = list(first.latencies)
            rss_one = _rss_mb(server)

            others = [Session(browser, base, s) for s in range(1, n_sessions)]
            await asyncio.gather(*(s.open() for s in others))
            sessions = [first, *others]
            for s in sessions:
                s.latencies.clear()
                s.sent = s.answered = 0
            t0 = time.monotonic()
            await asyncio.gather(*(s.type_until(t0 + seconds) for s in sessions))
            wall = time.monotonic() - t0
            rss_n = _rss_mb(server)
            for s in sessions:
                await s.context.close()
        finally:
            await browser.close()
    together = [x for s in sessions for x in s.latencies]
    return {
        "sessions": n_sessions, "seconds": round(wall, 1),
        "requests": sum(s.sent for s in sessions), "answered": sum(s.answered for s in sessions),
        "per_session_answered": [s.answered for s in sessions],
        "failures": [f for s in sessions for f in s.failures][:20],
        "alone": _quantiles(alone), "together": _quantiles(together),
        "rss_mb_1_session": round(rss_one, 1), f"rss_mb_{n_sessions}_sessions": round(rss_n, 1),
        "rss_growth_mb_per_extra_session": round((rss_n - rss_one) / max(n_sessions - 1, 1), 2),
        "cpus": os.cpu_count(),
    }


def bench(run_dir: Path, n_sessions: int = 10, seconds: float = 60, alone_seconds: float = 12,
          out: Path | None = RESULTS) -> dict:
    """Serve `run_dir`, run the sessions, write the results to `out` (JSON) and return them."""
    with serve(Path(run_dir)) as (base, server):
        result = asyncio.run(_bench(base, server, n_sessions, seconds, alone_seconds))
    result["run"] = Path(run_dir).name
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=ROOT / "cache" / "runs" / "apptest")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--alone-seconds", type=float, default=12)
    args = ap.parse_args()
    print(json.dumps(bench(args.run_dir, args.sessions, args.seconds, args.alone_seconds), indent=2))
