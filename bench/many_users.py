"""Many users on one dashboard: N browser sessions type inputs into the Explain page of one
`streamlit run app.py` server at once, each waiting for its input's prediction before typing the
next, for N = 1, 5 and 10. Per N: every request answered or not, latency p50/p95, answers per
session (busiest over least served), the server's and the browser's CPU time per answer, the
server's resident memory, and,
from the server's own record (`$VQLC_SERVE_STATS`), each answer's queue wait and compute time.

    .venv/bin/python bench/many_users.py --client ws --out bench/results/many_users_ws.json
    .venv/bin/python bench/many_users.py --client ws --app-root /tmp/old --out bench/results/many_users_ws_before.json
    .venv/bin/python bench/many_users.py               # chromium pages: bench/results/many_users.json

The server and the browser run on different cores (`--server-cpus`, `--client-cpus`; by
default the first core serves and the others browse), so the clients do not eat the server's
CPU. `--client browser` drives one chromium (Debian's, through playwright) with one context per
session; `--client ws` sessions speak Streamlit's websocket protocol and draw nothing, so what
is measured is the server (on 2 cores one core of chromium cannot draw ten sessions' pages fast
enough). Every input is new (a numbered word in it), so no cached explanation answers it.
`--app-root` serves another checkout (e.g. an older commit) to measure before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
from dashboard_server import ARGS, CHROMIUM, serve  # noqa: E402
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

RESULTS = ROOT / "bench" / "results" / "many_users.json"
WORDS = ["gorgeous", "dull", "witty", "tedious", "moving", "clumsy", "sharp", "bland", "warm", "cold"]
ANSWER_TIMEOUT_MS = 90_000
READY = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
    && document.querySelector('[data-testid="stTextArea"] textarea') !== null
    && !document.querySelector('[data-stale="true"], [data-testid^="stSkeleton"], [data-testid="stAppSkeleton"]')"""


class _Typist:
    """A session that types numbered inputs (`ask(i)`) until told to stop, and its tallies."""

    def __init__(self, sid: int):
        self.sid = sid
        self.latencies: list[float] = []
        self.sent = self.answered = 0
        self.failures: list[str] = []

    def text(self, i: int) -> tuple[str, str]:
        """Input i of this session and the marker that shows its answer arrived."""
        marker = f"take{self.sid}x{i}"
        return f"the {WORDS[i % len(WORDS)]} {marker} of this film is {WORDS[(i + self.sid) % len(WORDS)]}", marker

    async def ask(self, i: int) -> None:
        raise NotImplementedError

    async def type_until(self, deadline: float) -> None:
        i = 0
        while time.monotonic() < deadline:
            await self.ask(i)
            i += 1


class Session(_Typist):
    """One browser context on the Explain page."""

    def __init__(self, browser, base: str, sid: int):
        super().__init__(sid)
        self.browser, self.base = browser, base

    async def open(self) -> None:
        from playwright.async_api import expect

        self.context = await self.browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = await self.context.new_page()
        await self.page.goto(f"{self.base}/explain")
        await expect(self.page.get_by_role("heading", name="Explain a prediction")).to_be_visible(timeout=ANSWER_TIMEOUT_MS)
        # Open when a reader could type: the page's first run (the example's explanation, queued
        # behind the other sessions' first runs) has ended and the text box, a lazily loaded
        # component, is drawn. Waiting for the title alone left the first `fill` to find no box
        # within playwright's 30 s on a loaded core (two runs in three beside a busy loop).
        await self.page.wait_for_function(READY, timeout=ANSWER_TIMEOUT_MS)

    async def ask(self, i: int) -> None:
        from playwright.async_api import expect

        text, marker = self.text(i)
        box = self.page.locator('[data-testid="stTextArea"] textarea')
        sentence = self.page.locator('[data-testid="stHtml"] .vqlc-sentence')  # `vqlc_ui.colored_sentence`
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

    async def close(self) -> None:
        await self.context.close()


class WsSession(_Typist):
    """One session that speaks Streamlit's own protocol (protobuf over the websocket, as the
    browser does) and renders nothing: it sends the Explain page's text box value and waits for
    the run that shows its prediction. Its cost on the client side is a few milliseconds an
    answer, so it measures the server alone."""

    def __init__(self, base: str, sid: int):
        super().__init__(sid)
        self.url = base.replace("http://", "ws://") + "/_stcore/stream"
        self.page_hash, self.box = "", None

    async def _run(self, widgets=None) -> list[str]:
        """Rerun the Explain page (with the given widget states); the texts it drew, tags removed."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.page_name, msg.rerun_script.page_script_hash = "explain", self.page_hash
        if widgets is not None:
            msg.rerun_script.widget_states.CopyFrom(widgets)
        await self.ws.send(msg.SerializeToString())
        texts = []
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(self.ws.recv(), ANSWER_TIMEOUT_MS / 1000))
            kind = fwd.WhichOneof("type")
            if kind == "navigation":
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                what = el.WhichOneof("type")
                if what == "text_area":
                    self.box = el.text_area.id
                elif what == "markdown":
                    texts.append(re.sub(r"<[^>]+>", "", el.markdown.body))
                elif what == "html":  # the coloured sentence (`vqlc_ui.colored_sentence`, st.html)
                    texts.append(re.sub(r"<[^>]+>", "", el.html.body))
                elif what == "metric":
                    texts.append(f"{el.metric.label}: {el.metric.body}")
            elif kind == "script_finished" and fwd.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return texts  # (a run the page itself ended to run again, see `vqlc_ui.app_navigation`, is not the end)

    async def open(self) -> None:
        import websockets

        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], max_size=None)
        await self._run()
        if self.box is None:
            raise RuntimeError("the Explain page drew no text box")

    async def ask(self, i: int) -> None:
        from streamlit.proto.WidgetStates_pb2 import WidgetStates

        widgets = WidgetStates()
        box = widgets.widgets.add()
        box.id = self.box
        box.string_value, marker = self.text(i)
        self.sent += 1
        t0 = time.perf_counter()
        try:
            texts = await self._run(widgets)
        except (asyncio.TimeoutError, OSError) as e:
            self.failures.append(f"session {self.sid} input {i}: {type(e).__name__}")
            return
        if not (any(marker in t for t in texts) and any(t.startswith("Prediction: ") for t in texts)):
            self.failures.append(f"session {self.sid} input {i}: its prediction was not shown")
            return
        self.latencies.append(time.perf_counter() - t0)
        self.answered += 1

    async def close(self) -> None:
        await self.ws.close()


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    a = np.asarray(xs)
    return {"n": len(xs), "p50_s": round(float(np.percentile(a, 50)), 3), "p95_s": round(float(np.percentile(a, 95)), 3),
            "max_s": round(float(a.max()), 3)}


def _tree(proc) -> list[psutil.Process]:
    p = psutil.Process(proc.pid)
    return [p, *p.children(recursive=True)]


def _rss_mb(proc) -> float:
    return sum(q.memory_info().rss for q in _tree(proc)) / 2**20


def _cpu_s(proc) -> float:
    """User + system CPU seconds of a process and all its children (the browser's: the bench's)."""
    total = 0.0
    for q in _tree(proc):
        try:
            total += sum(q.cpu_times()[:2])
        except psutil.NoSuchProcess:  # a renderer that closed meanwhile
            pass
    return total


def _server_stats(path: Path, offset: int) -> dict:
    """Queue wait and compute time of the answers the server recorded after byte `offset`."""
    if not path.exists():
        return {}
    with open(path) as f:
        f.seek(offset)
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        return {}
    return {"queue_wait": _quantiles([r["wait_s"] for r in rows]), "compute": _quantiles([r["compute_s"] for r in rows]),
            "mean_batch": round(float(np.mean([r["batch"] for r in rows])), 2), "recorded": len(rows)}


async def _measure(make, server, n: int, seconds: float, stats: Path, first: int) -> dict:
    sessions = [make(first + s) for s in range(n)]
    await asyncio.gather(*(s.open() for s in sessions))
    for s in sessions:
        s.latencies.clear()
        s.sent = s.answered = 0
    me = psutil.Process()
    offset, cpu0, client0 = stats.stat().st_size if stats.exists() else 0, _cpu_s(server), _cpu_s(me)
    t0 = time.monotonic()
    await asyncio.gather(*(s.type_until(t0 + seconds) for s in sessions))
    wall, cpu = time.monotonic() - t0, _cpu_s(server) - cpu0
    client = _cpu_s(me) - client0 - cpu  # the server is a child of this process too
    rss = _rss_mb(server)
    for s in sessions:
        await s.close()
    per = [s.answered for s in sessions]
    answered = sum(per)
    return {"sessions": n, "seconds": round(wall, 1), "requests": sum(s.sent for s in sessions), "answered": answered,
            "per_session_answered": per, "busiest_over_least": round(max(per) / max(min(per), 1), 2),
            "latency": _quantiles([x for s in sessions for x in s.latencies]),
            "server_cpu_s_per_answer": round(cpu / max(answered, 1), 3),
            "client_cpu_s_per_answer": round(client / max(answered, 1), 3), "server_rss_mb": round(rss, 1),
            **_server_stats(stats, offset), "failures": [f for s in sessions for f in s.failures][:20]}


async def _bench(base: str, server, counts: list[int], seconds: float, stats: Path, client_cpus,
                 client: str) -> list[dict]:
    before = os.sched_getaffinity(0)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)  # the browser started below inherits it
    try:
        if client == "ws":
            return await _sessions(lambda sid: WsSession(base, sid), server, counts, seconds, stats)
        from playwright.async_api import async_playwright

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            try:
                return await _sessions(lambda sid: Session(browser, base, sid), server, counts, seconds, stats)
            finally:
                await browser.close()
    finally:
        os.sched_setaffinity(0, before)


async def _sessions(make, server, counts: list[int], seconds: float, stats: Path) -> list[dict]:
    warm = make(999)
    await warm.open()
    await warm.ask(10_000)  # the first input waits for the model to load: not counted
    await warm.close()
    return [await _measure(make, server, n, seconds, stats, first=100 * i) for i, n in enumerate(counts)]


def bench(run_dir: Path, counts=(1, 5, 10), seconds: float = 60, out: Path | None = RESULTS,
          app_root: Path = ROOT, server_cpus: set[int] | None = None, client_cpus: set[int] | None = None,
          client: str = "browser") -> dict:
    """Serve `run_dir` from `app_root`, run each session count for `seconds` with `client`
    sessions ("browser": chromium pages; "ws": the protocol alone), write the results to `out`
    (JSON) and return them."""
    if client not in ("browser", "ws"):
        raise ValueError(f"Unknown client '{client}'; choose browser or ws.")
    stats = Path(tempfile.mkdtemp(prefix="vqlc_stats_")) / "serve.jsonl"
    with serve(Path(run_dir), cpus=server_cpus, env={"VQLC_SERVE_STATS": str(stats)}, app_root=app_root) as (base, server):
        runs = asyncio.run(_bench(base, server, list(counts), seconds, stats, client_cpus, client))
    result = {"run": Path(run_dir).name, "client": client, "app_root": str(app_root), "cpus": os.cpu_count(),
              "server_cpus": sorted(server_cpus or []), "client_cpus": sorted(client_cpus or []), "by_sessions": runs}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_result(out, result, indent=2)
    return result


def _cpus(text: str | None) -> set[int] | None:
    return {int(c) for c in text.split(",")} if text else None


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=ROOT / "cache" / "runs" / "default", help="the run to serve")
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 5, 10], help="session counts, one measurement each")
    ap.add_argument("--seconds", type=float, default=60, help="how long the sessions type, per count")
    ap.add_argument("--app-root", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON results go")
    ap.add_argument("--client", choices=["browser", "ws"], default="browser",
                    help="browser: a chromium page per session (what people see, browser included); ws: sessions "
                         "that speak Streamlit's protocol and render nothing (the server alone)")
    n = os.cpu_count() or 1
    ap.add_argument("--server-cpus", default="0" if n > 1 else None, help="comma-separated cores for the server")
    ap.add_argument("--client-cpus", default=",".join(map(str, range(1, n))) if n > 1 else None,
                    help="comma-separated cores for the browser")
    args = ap.parse_args()
    r = bench(args.run_dir, args.sessions, args.seconds, args.out, args.app_root, _cpus(args.server_cpus),
              _cpus(args.client_cpus), args.client)
    print(json.dumps(r, indent=2))
