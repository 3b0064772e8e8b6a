"""A build on a user's own texts (the Build page's upload): the file kept under
`<cache>/uploads/` by its content (a file uploaded twice is stored once), a first guess at its
text and label columns among those `datasets.file_columns` reads, and the build configuration that
names it as `--dataset`, with the same column choices as `--text-column` and `--label-column`."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from vqlc_core.base.runio import RunError, atomic_path, check_run_name
from vqlc_core.pipeline.config import BuildConfig, preset
from vqlc_core.data.datasets import USER_FILE_SUFFIXES

UPLOADS = "uploads"


def save_upload(name: str, data: bytes, cache_dir: str | Path) -> Path:
    """Store an uploaded file under `<cache_dir>/uploads/` as `<stem>-<digest><suffix>`."""
    suffix = Path(name).suffix.lower()
    if suffix not in USER_FILE_SUFFIXES:
        raise RunError(f"'{name}' is not a .csv, .jsonl, .json or .parquet file; save the data in one of those formats.")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(name).stem).strip(".-") or "texts"
    path = Path(cache_dir) / UPLOADS / f"{stem[:40]}-{hashlib.sha256(data).hexdigest()[:12]}{suffix}"
    if not path.exists():
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    return path


def default_run_name(path: Path) -> str:
    """A run name for an uploaded file: its stem, without the digest."""
    return re.sub(r"-[0-9a-f]{12}$", "", path.stem) or "mine"


def guess_column(columns: list[str], wanted: str, avoid: str | None = None) -> int:
    """The index of the column named `wanted`, else of the first other than `avoid` (0 for none)."""
    if wanted in columns:
        return columns.index(wanted)
    return next((i for i, c in enumerate(columns) if c != avoid), 0)


def upload_config(preset_name: str, path: Path, run: str, text_column: str, label_column: str,
                  limit: int | None, cache_dir: str | Path) -> BuildConfig:
    """The build of preset `preset_name` on the uploaded file `path`."""
    check_run_name(run)
    if text_column == label_column:
        raise RunError(f"The text and the label column are both '{text_column}'; choose two different columns.")
    return preset(preset_name, run=run, dataset=str(path), text_column=text_column, label_column=label_column,
                  limit=limit or None, cache_dir=cache_dir)
