"""The standalone HTML export of a built run at full size: how long writing it takes, cold (no word
cloud stored in the run) and warm (every cloud stored, as the maps stage and the dashboard leave
it), its size, and how long chromium takes to open it from disk with the network blocked (the
goals: under 15 MB and under 3 s to open for the default run's 400 concepts of one method).

    .venv/bin/python bench/export_html.py --run default --method vqlc \\
        --before /tmp/export_before     # writes bench/results/export_html.json

Each export runs in a fresh process over a private copy of the run (links to the run's files and
an empty ui/ folder of its own), so nothing is written to the run; the median of `--repeats`
is reported. `--before` names a checkout (a folder holding an older `vqlc_core`) timed side by
side with this one, cold and warm in turn, and the ratios before/after are reported.
Opening is timed three times, each in a fresh browser context: the load event, first contentful
paint, and the grid's clouds decoded (every data URI in the grid turned into pixels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dashboard_server import ARGS, CHROMIUM  # bench/ is on the path: the script's folder, or pytest's pythonpath
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "export_html.json"
DECODED = """async () => Promise.all([...document.querySelectorAll('.grid .cloud')].map(d => {
    const im = new Image(); im.src = getComputedStyle(d).backgroundImage.slice(5, -2); return im.decode();
})).then(all => all.length)"""
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


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


def linked_run(src: Path, cache: Path) -> Path:
    """`cache`/runs/<name>: links to every entry of run `src` but an empty ui/ folder of its own."""
    dst = cache / "runs" / src.name
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        if entry.name != "ui":
            (dst / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    (dst / "ui").mkdir()
    return dst


def worker(app_root: Path, job: str, run_dir: Path, method: str, out: Path | None = None) -> dict:
    """Run `job` ("export" or "clouds") in a fresh process importing `app_root`'s vqlc_core."""
    cmd = [sys.executable, __file__, "--worker", job, "--run-dir", str(run_dir), "--method", method]
    cmd += ["--out", str(out)] if out else []
    env = {**os.environ, **ENV, "PYTHONPATH": str(app_root)}
    done = subprocess.run(cmd, env=env, cwd=app_root, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def work(job: str, run_dir: Path, method: str, out: Path | None) -> dict:
    """In the worker process: time one export (the run opened, the file written), or store every
    cloud of `method` (the warm state)."""
    from vqlc_core.pipeline.run import Run
    from vqlc_core.views import browse, export_html

    t0 = time.perf_counter()
    run = Run(run_dir)
    if job == "clouds":
        return {"drawn": browse.precompute_clouds(run, method), "s": round(time.perf_counter() - t0, 2)}
    export_html.write(run, method, out)
    return {"export_s": round(time.perf_counter() - t0, 2), "module": export_html.__file__}


def time_exports(roots: dict[str, Path], src: Path, method: str, repeats: int, tmp: Path) -> dict:
    """Median export time of each checkout, cold and warm, the checkouts taking turns."""
    times = {label: {"cold": [], "warm": []} for label in roots}
    warm_dirs, clouds = {}, {}
    for label, root in roots.items():
        warm_dirs[label] = linked_run(src, tmp / f"warm-{label}")
        clouds[label] = worker(root, "clouds", warm_dirs[label], method)  # what the maps stage adds per method
        print(f"{label}: drew every cloud for the warm runs: {clouds[label]}", file=sys.stderr)
    for i in range(repeats):
        for label, root in roots.items():
            cold = linked_run(src, tmp / f"cold-{label}-{i}")
            for state, run_dir in (("cold", cold), ("warm", warm_dirs[label])):
                r = worker(root, "export", run_dir, method, tmp / f"{label}-{state}-{i}.html")
                times[label][state].append(r["export_s"])
                print(f"{label} {state} #{i + 1}: {r['export_s']} s ({r['module']})", file=sys.stderr)
    return {label: {**{f"{state}_s": {"median": statistics.median(ts), "runs": ts} for state, ts in t.items()},
                    "draw_every_cloud": clouds[label]} for label, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="default", help="the run's name under cache/runs/ (default: default)")
    ap.add_argument("--method", default="vqlc", help="the concept method to export (default: vqlc)")
    ap.add_argument("--repeats", type=int, default=3, help="exports timed per checkout and state (default: 3)")
    ap.add_argument("--before", type=Path, help="an older checkout to time side by side (its vqlc_core)")
    ap.add_argument("--no-open", action="store_true", help="skip timing chromium opening the file")
    ap.add_argument("--worker", choices=("export", "clouds"), help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(work(args.worker, args.run_dir, args.method, args.out)))
        return

    src = (ROOT / "cache" / "runs" / args.run).resolve()
    roots = {"before": args.before.resolve()} if args.before else {}
    roots["after"] = ROOT
    with tempfile.TemporaryDirectory() as tmp:
        timed = time_exports(roots, src, args.method, args.repeats, Path(tmp))
        path = Path(tmp) / f"after-cold-{args.repeats - 1}.html"
        html = path.read_text()
        result = {"run": args.run, "method": args.method, "concepts": html.count("<a class=card "),
                  "cpus": os.cpu_count(), "repeats": args.repeats, "export": timed,
                  "bytes": path.stat().st_size, "mb": round(path.stat().st_size / 1e6, 2)}
        if args.before:
            result["speedup"] = {state: round(timed["before"][f"{state}_s"]["median"]
                                              / timed["after"][f"{state}_s"]["median"], 1)
                                 for state in ("cold", "warm")}
        if not args.no_open:
            result["open"] = open_times(path)
    print(json.dumps(result, indent=2))
    write_result(RESULTS, result, indent=2)


if __name__ == "__main__":
    main()
