"""Writing a benchmark's result so that it says where it comes from: every results JSON under
bench/results/ written through `write_result` records the commit, the date, the machine and the
command that produced it.

A result that is a JSON object gets a "provenance" key; one that is a list (rows) is written as it
is, and its provenance beside it as `<name>.provenance.json`, so that readers of the rows are
unchanged. On a lent device machine ($OUT set) the files are copied under $OUT too, so they come
back. `read_result` reads either form without the provenance.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


OUTPUTS = ("bench/results", "docs")  # what benches and generators write, not what they run


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT, timeout=10)
        # "+changes" is code that differs from the commit; written results and docs do not change what a bench
        # measures (a bench run while another's results await their commit stays at the commit)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in OUTPUTS)], capture_output=True,
                               text=True, cwd=ROOT, timeout=10).stdout.strip()
        return done.stdout.strip() + ("+changes" if dirty else "") if done.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> str:
    """The machine in words: CPU model and cores, memory, and the GPU when torch sees one."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    words = [f"{cpu}, {os.cpu_count()} cores"]
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        words.append(f"{pages / 2**30:.0f} GiB memory")
    except (ValueError, OSError, AttributeError):
        pass
    torch = sys.modules.get("torch")  # only when the bench loaded it: asking costs no import
    if torch is not None and torch.cuda.is_available():
        words.append(", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))
    return "; ".join(words)


def provenance(command: str | None = None) -> dict:
    """Commit, UTC date, machine and command of the running benchmark."""
    return {"commit": _commit(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "command": command or "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)
                                                                             if sys.argv[0] else "-", *sys.argv[1:]])}


def write_result(path: str | Path, data, command: str | None = None, indent: int = 1) -> Path:
    """Write `data` as JSON to `path` (a bare name goes under bench/results/ as NAME.json) with its
    provenance; return the path."""
    path = Path(path)
    if path.parent == Path(".") and not path.suffix:
        path = RESULTS / f"{path.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    prov = provenance(command)
    files = {}
    if isinstance(data, dict):
        files[path] = {**data, "provenance": prov}
    else:
        files[path] = data
        files[path.with_name(f"{path.stem}.provenance.json")] = prov
    for p, value in files.items():
        text = json.dumps(value, indent=indent, default=float) + "\n"
        p.write_text(text)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], p.name).write_text(text)
    return path


def read_result(path: str | Path):
    """A stored result without its provenance (None when there is no such file)."""
    path = Path(path)
    if path.parent == Path(".") and not path.suffix:
        path = RESULTS / f"{path.name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        data.pop("provenance", None)
    return data


def read_provenance(path: str | Path) -> dict | None:
    """The provenance recorded with a stored result, or None for one written before it was recorded."""
    path = Path(path)
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        return data.get("provenance")
    side = path.with_name(f"{path.stem}.provenance.json")
    return json.loads(side.read_text()) if side.exists() else None
