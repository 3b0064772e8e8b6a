"""Atomic file writes, safe run names and the one error type a user sees.

Every file a build produces is written under a temporary name in the same folder and then
renamed, so a half-written file is never taken for a finished one. Nothing here unpickles:
arrays go to .npy (allow_pickle=False), tables to parquet, metadata to JSON.
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

FORMAT_VERSION = 1


class RunError(ValueError):
    """A mistake a user can make or a run directory that does not match: one clear sentence that
    says what was wrong and what to do. The command line prints it and the pages show it, never a
    traceback; a bad value is a ValueError, so `except ValueError` catches it too.

    Examples:
        >>> try:
        ...     vq.open_run("no-such-run")
        ... except vq.RunError as e:
        ...     print(e)
        No run 'no-such-run' under cache/runs; the runs there: default (`vqlc build` builds one).
    """


RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_run_name(name) -> str:
    """`name` when it is a safe run name (one folder name of letters, digits, '.', '_' and '-',
    not '.' or '..'); otherwise a RunError, so no command can write or delete outside its run."""
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name) or name in (".", ".."):
        raise RunError(f"Run name {name!r} is not allowed: use one folder name made of letters, digits, "
                       "'.', '_' and '-' (not '.' or '..').")
    return name


class SourceError(RunError):
    """A dataset or model the user named cannot be used: one clear sentence."""


class CorruptStage(RunError):
    """A finished stage whose files are missing or changed since they were written.

    Args:
        message: the sentence to show.
        run_dir: the run's folder.
        stage: the stage to rebuild (`vqlc build --rebuild STAGE`).

    Attributes:
        run_dir (Path): the run's folder.
        stage (str): the stage to rebuild.
    """

    def __init__(self, message: str, run_dir, stage: str):
        super().__init__(message)
        self.run_dir, self.stage = Path(run_dir), stage


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default))


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def read_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def write_parquet(path: str | os.PathLike, df) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


def read_parquet(path: str | os.PathLike):
    import pandas as pd

    return pd.read_parquet(path)


def write_safetensors(path: str | os.PathLike, tensors: dict, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={k: str(v) for k, v in (metadata or {}).items()})


def read_safetensors(path: str | os.PathLike) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "vqlc_format": str(FORMAT_VERSION)}
    for name in ("torch", "transformers", "numpy", "scikit-learn", "pandas"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} to JSON")
