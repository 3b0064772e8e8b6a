"""Stage times of a whole build in one process against the same build under torchrun, on this
machine's CPU (gloo): `vqlc build --preset PRESET` from scratch (models and data already in the
project's cache), once as one process with every core's thread, once as `torchrun --standalone
--nproc_per_node=N` with one thread a rank. Each run's stage times are its manifest's `wall_s`.

Usage: python bench/build_ranks.py [--preset default] [--ranks 2]; writes bench/results/build_ranks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]


def _build(cache: Path, run: str, preset: str, ranks: int, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    vqlc = ["-m", "vqlc_core", "build", "--preset", preset, "--run-name", run, "--cache-dir", str(cache), "--device", "cpu"]
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", *vqlc]
           if ranks > 1 else [sys.executable, *vqlc])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"build failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    manifest = json.loads((cache / "runs" / run / "manifest.json").read_text())
    stages = {name: s.get("wall_s") for name, s in manifest["stages"].items()}
    ft = manifest["stages"].get("finetune", {})
    return {"ranks": ranks, "threads_per_rank": threads, "wall_s": round(wall, 1), "stages_s": stages,
            "all_stages_s": round(sum(v for v in stages.values() if v), 1), "chosen_epoch": ft.get("chosen_epoch"),
            "dev_accuracy": ft.get("dev_accuracy"), "command": " ".join(cmd[1:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="default", help="the build's preset")
    ap.add_argument("--ranks", type=int, default=2, help="torchrun processes (one thread each)")
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="vqlc_ranks_") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        for sub in ("downloads", "datasets", "models"):
            (cache / sub).symlink_to(ROOT / "cache" / sub, target_is_directory=True)
        runs = [_build(cache, "one", a.preset, 1, cores), _build(cache, "ranks", a.preset, a.ranks, 1)]
    result = {"preset": a.preset, "cores": cores, "load_average_at_start": os.getloadavg()[0], "runs": runs}
    write_result(ROOT / "bench" / "results" / "build_ranks.json", result, indent=2)
    names = list(runs[0]["stages_s"])
    print("| stage | " + " | ".join(f"{r['ranks']} rank(s) x {r['threads_per_rank']} thread(s)" for r in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for n in names + ["all stages"]:
        get = (lambda r: r["all_stages_s"]) if n == "all stages" else (lambda r, n=n: r["stages_s"].get(n))
        print(f"| {n} | " + " | ".join(f"{get(r)}" for r in runs) + " |")


if __name__ == "__main__":
    main()
