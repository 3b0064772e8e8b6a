"""Private copies of the small apptest run: a sealed one, with every finished stage's files recorded
as a build of this version records them, for tests that damage a run directory; a linked one, for
tests that write beside a run's files."""

from __future__ import annotations

import shutil
from pathlib import Path

from vqlc_core.pipeline.run import Run

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


def linked_copy(src: Path, cache: Path, name: str | None = None) -> Run:
    """`cache`/runs/`name` (default: `src`'s own name) whose entries are links to `src`'s, but for
    an empty ui/ folder of its own and no llm/ folder (judge results and labels a test writes stay
    the test's): a cheap private run for tests that write there (case-study pins, word clouds,
    labels) or replace a file (unlink the link first)."""
    dst = Path(cache) / "runs" / (name or Path(src).name)
    dst.mkdir(parents=True)
    for entry in Path(src).iterdir():
        if entry.name not in ("ui", "llm"):
            (dst / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    (dst / "ui").mkdir()
    return Run(dst)
