"""One build of a run at a time: an advisory lock (flock) on a file beside the run's folder,
held for the whole build, so a second build of the same run, or `--force` on it, is refused in
one sentence naming the process that holds it. The kernel drops the lock when its process ends,
however it ends, so a lock left by a killed build is simply taken over."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from vqlc_core.base.runio import RunError

log = logging.getLogger(__name__)


def lock_path(run_dir: Path) -> Path:
    """The lock file of `run_dir`: beside it (`--force` deletes the folder, never the lock)."""
    return run_dir.parent / f".{run_dir.name}.lock"


def _holder(text: str) -> dict:
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return {}


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s build lock while the block runs; a one-sentence RunError when another
    process (or another build in this one) holds it."""
    path = lock_path(Path(run_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        before = _holder(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = (f"process {before['pid']} on {before.get('host', 'this machine')}, started {before.get('started')}"
                   if before.get("pid") else "another process")
            raise RunError(f"Run '{Path(run_dir).name}' is being built by {who}; wait for that build to finish or "
                           "stop it, then run this again (or build under another --run name).") from None
        if before.get("pid") and before["pid"] != os.getpid():
            log.info("vqlc: taking over the lock of run '%s' from process %s, which has ended",
                     Path(run_dir).name, before["pid"])
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays, so no two processes lock different files


@contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Hold an advisory lock on the file `path` while the block runs, waiting for it while another
    process holds it: for what is fetched or converted once into a shared cache folder, so that
    a second process waits and then finds it there instead of writing it beside the first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
