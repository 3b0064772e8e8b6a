"""Integrity of a run directory: the sizes and sha256 digests of each stage's files (which files,
the stage registry says) recorded in the manifest when the stage completes, and the check that finds a stage whose files
went missing, were truncated or changed since (a hand-edited shard, a half-copied run).

Sizes are checked on every load (cheap); digests when `deep` (the build does this before it
skips a finished stage, so it never builds on a changed file).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

CHUNK = 1 << 20
log = logging.getLogger(__name__)


def _npy_shape(path: Path) -> tuple | None:
    """The shape in a .npy file's header, or None when the header is unreadable."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        return tuple(arr.shape)
    except Exception:  # any damage to the header: the integrity check reports the file as corrupt
        log.debug("unreadable .npy header in %s", path, exc_info=True)
        return None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def record(run_dir: Path, files: list[Path]) -> dict:
    """{relative path: {"bytes", "sha256"}} of a finished stage's `files` (paths relative to
    `run_dir`, from the stage registry's globs), for its manifest entry."""
    run_dir = Path(run_dir)
    return {str(rel): {"bytes": (run_dir / rel).stat().st_size, "sha256": sha256(run_dir / rel)} for rel in files}


def problem(run_dir: Path, files: dict, deep: bool = True) -> str | None:
    """What is wrong with a finished stage's files against their record, in a few words; None
    when every file is there with its recorded size (and digest, when `deep`)."""
    run_dir = Path(run_dir)
    for rel, want in sorted(files.items()):
        path = run_dir / rel
        if not path.is_file():
            return f"{rel} is missing"
        size = path.stat().st_size
        if size != want["bytes"]:
            shape = _npy_shape(path) if path.suffix == ".npy" else None
            got = f"shape {shape}, " if shape is not None else ""
            return f"{rel} has {got}{size} bytes, expected {want['bytes']} as written"
        if deep and sha256(path) != want["sha256"]:
            return f"{rel} changed since it was written (its sha256 differs)"
    return None
