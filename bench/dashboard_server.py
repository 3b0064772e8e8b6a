"""Start the dashboard for a browser test or benchmark: `python -m vqlc_ui.serve` (`streamlit run
app.py` with the libraries imported first; plain `streamlit run app.py` for a checkout without it)
on a free 127.0.0.1 port over a cache that holds only one run, and Debian chromium's launch arguments.
Shared by bench/many_users.py, tests/ui/test_browser.py and tests/ui/test_many_users.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
# Without the networking flags chromium keeps trying hosts this machine cannot reach.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def launcher(app_root: Path = ROOT) -> list[str]:
    """How `app_root` is served: `-m vqlc_ui.serve` (the libraries imported before the server
    listens), or `-m streamlit run app.py` for a checkout without it (e.g. an older commit)."""
    if (Path(app_root) / "vqlc_ui" / "serve.py").exists():
        return ["-m", "vqlc_ui.serve"]
    return ["-m", "streamlit", "run", "app.py"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except OSError:
        return False


@contextmanager
def serve(run_dir: Path, timeout_s: float = 60, cpus: set[int] | None = None, env: dict | None = None,
          app_root: Path = ROOT):
    """Yield (base URL, server process) of a dashboard whose only run is `run_dir` (so it is the
    run the sidebar picks); the server's process group is killed afterwards. `cpus`: the cores
    the server (and every thread it starts) may run on; `env`: more environment for it;
    `app_root`: the checkout whose app.py is served (e.g. an older commit, to compare)."""
    cache = Path(tempfile.mkdtemp(prefix="vqlc_serve_"))
    (cache / "runs").mkdir()
    (cache / "runs" / run_dir.name).symlink_to(Path(run_dir).resolve(), target_is_directory=True)
    port = free_port()
    env = {**os.environ, "VQLC_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    if Path(app_root).resolve() != ROOT:
        env["PYTHONPATH"] = str(Path(app_root).resolve())  # its own vqlc_core, not the installed one
    log_path = cache / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, *launcher(app_root), "--server.address", "127.0.0.1", "--server.port",
             str(port), "--server.headless", "true", "--server.fileWatcherType", "none",
             "--browser.gatherUsageStats", "false"],
            cwd=app_root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not healthy(f"{base}/_stcore/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {proc.returncode}" if proc.poll() is not None else f"no health answer in {timeout_s} s"
                raise RuntimeError(f"the streamlit server {why}; its log:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.3)
        yield base, proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
