"""What starting vqlc costs: `import vqlc_core` and `vqlc --help`, each in a fresh process, for
this checkout and, with `--baseline DIR`, another one beside it, alternating so both see the
same load; medians of `--repeat` runs, and which heavy libraries each import pulled in.

Usage: python bench/imports.py [--baseline /path/to/other/checkout] [--repeat 5]
Writes bench/results/imports.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sklearn", "scipy", "plotly", "pandas", "transformers")
COMMANDS = {
    "import vqlc_core": ["-c", "import vqlc_core"],
    "vqlc --help": ["-m", "vqlc_core", "--help"],
}


def once(checkout: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=checkout, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def loaded(checkout: Path, args: list[str]) -> list[str]:
    """The heavy libraries the command imports (from `-X importtime`)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=checkout, env=env, capture_output=True,
                         text=True, check=True).stderr
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.splitlines() if "|" in line}
    return [h for h in HEAVY if h in names]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="another checkout to time beside this one")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command per checkout (default: 5)")
    a = ap.parse_args()
    checkouts = {"this": ROOT, **({"baseline": a.baseline.resolve()} if a.baseline else {})}
    times = {(c, k): [] for c in checkouts for k in COMMANDS}
    for _ in range(a.repeat):
        for k, args in COMMANDS.items():
            for c, path in checkouts.items():
                times[(c, k)].append(once(path, args))
    out = [{"checkout": c, "path": str(checkouts[c]), "command": k, "median_s": round(statistics.median(t), 3),
            "runs_s": [round(x, 3) for x in t], "heavy_imports": loaded(checkouts[c], COMMANDS[k])}
           for (c, k), t in times.items()]
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    write_result(ROOT / "bench" / "results" / "imports.json", out)
    for r in out:
        print(f"{r['checkout']:9s} {r['command']:17s} median {r['median_s']:.2f} s  heavy: {', '.join(r['heavy_imports']) or 'none'}")


if __name__ == "__main__":
    main()
