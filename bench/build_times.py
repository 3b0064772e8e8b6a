"""A build's stage times, as the README reports them: each stage's wall time read from a built
run's manifest (`stages.<name>.wall_s`, what `vqlc build` logs as "[stage] done in N s"), the
fine-tuning's printed estimate against its training time, and the test accuracy.

Time a quiet build from scratch first, then record it under a label:

    /usr/bin/time -v .venv/bin/python -m vqlc_core build --preset default --run buildtime
    .venv/bin/python bench/build_times.py --run buildtime --label after

Writes (updates) bench/results/default_build.json: one entry per label, the command that built
the run given with --command.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "default_build.json"


def stage_times(run_dir: Path) -> dict:
    """Stage wall times (s) in build order, their sum, the fine-tuning's estimate and time, and the
    classifier's test accuracy, from a built run's folder."""
    from vqlc_core.pipeline.run import Run

    run = Run(run_dir)
    stages = run.manifest.data["stages"]
    walls = {s: stages[s]["wall_s"] for s in run.stage_order() if "wall_s" in stages.get(s, {})}
    ft = stages.get("finetune", {})
    metrics = run_dir / "classifier" / "metrics.json"
    acc = json.loads(metrics.read_text())["accuracy"] if metrics.exists() else {}
    return {"run": run_dir.name, "stages_s": walls, "all_stages_s": round(sum(walls.values()), 2),
            "finetune_estimated_s": ft.get("estimated_seconds"), "finetune_trained_s": ft.get("seconds"),
            "test_accuracy": acc.get("test"), "dev_accuracy": acc.get("dev"),
            "versions": run.manifest.data.get("versions", {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a built run's name under cache/runs/, or its folder")
    ap.add_argument("--label", required=True, help="the entry's name in the results file, e.g. before or after")
    ap.add_argument("--command", default="vqlc build --preset default --run <run>", help="how the run was built")
    ap.add_argument("--note", default="", help="conditions of the measurement (quiet, loaded, machine)")
    a = ap.parse_args()
    run_dir = Path(a.run) if Path(a.run).is_dir() else ROOT / "cache" / "runs" / a.run
    saved = json.loads(OUT.read_text()) if OUT.exists() else {}
    saved[a.label] = {**stage_times(run_dir), "command": a.command, "note": a.note}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    saved.pop("provenance", None)
    write_result(OUT, saved)
    print(json.dumps(saved[a.label], indent=1))


if __name__ == "__main__":
    main()
