"""A private copy of the small apptest run, with every finished stage's files recorded as a build
of this version records them, for tests that damage a run directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from vqlc_core.run import Run

APPTEST_ARGS = ["--limit", "300", "--n-concepts", "20", "--faithfulness-texts", "20"]  # apptest's config


def sealed_copy(src: Path, cache: Path, name: str = "copy") -> Run:
    """Copy run `src` to `cache`/runs/`name` (without its drawn word clouds) and record the sizes
    and digests of every finished stage's files in its manifest."""
    dst = Path(cache) / "runs" / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("ui"))
    run = Run(dst)
    for stage, entry in run.manifest.data["stages"].items():
        if entry.get("state") == "complete":
            entry["files"] = run.seal(stage)
    run.manifest.save()
    return Run(dst)
