"""The one estimator interface shared by every concept method (VQLC, K-Means, LACOAT).

A method fits on rows of an activation store, maps (N, d) vectors to concept ids, records its
fit time and peak memory in `fit_info_`, and saves itself as .npy arrays plus JSON (no pickle).
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import psutil

from .runio import RunError, read_json, read_npy, write_json, write_npy

METHOD_FILE = "method.json"


def _rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def _maxrss_bytes() -> int:
    # ru_maxrss is in kilobytes on Linux and in bytes on macOS.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


class PeakMemory:
    """Peak growth of this process's resident memory (RSS) during a `with` block, in MB.

    On Linux the kernel's high-water mark (VmHWM) is reset at entry (`/proc/self/clear_refs`)
    and read at exit, so `peak_mb` is exact whatever the block's timing. Elsewhere a background
    thread samples RSS every `interval_s` seconds (a lower bound: a shorter spike is missed).
    `upper_mb` is getrusage's lifetime high-water mark at exit minus the RSS at entry, an upper
    bound (it also counts any earlier, higher peak of the process).
    """

    def __init__(self, interval_s: float = 0.02):
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.upper_mb = 0.0

    def __enter__(self) -> "PeakMemory":
        self._hwm = _reset_hwm()
        self._start = _rss_bytes()
        self._peak = self._start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, _rss_bytes())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, _rss_bytes())
        if self._hwm:
            self._peak = max(self._peak, _hwm_bytes())
        self.peak_mb = (self._peak - self._start) / 2**20
        self.upper_mb = max(self.peak_mb, (_maxrss_bytes() - self._start) / 2**20)


def _reset_hwm() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _hwm_bytes() > 0
    except OSError:
        return False


def _hwm_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def save_method(path: str | Path, name: str, params: dict, arrays: dict[str, np.ndarray], state: dict) -> None:
    """Write a fitted method to folder `path`: one .npy per array, then `method.json` last."""
    path = Path(path)
    for key, arr in arrays.items():
        write_npy(path / f"{key}.npy", np.asarray(arr))
    write_json(path / METHOD_FILE, {"method": name, "params": params, "arrays": sorted(arrays), "state": state})


def load_method(path: str | Path, *names: str) -> tuple[dict, dict[str, np.ndarray], dict]:
    """Read what `save_method` wrote: (params, arrays, state); checks the method is one of `names`."""
    path = Path(path)
    if not (path / METHOD_FILE).exists():
        raise RunError(f"No fitted {names[0]} method in {path}; rebuild this method's stage.")
    meta = read_json(path / METHOD_FILE)
    if meta.get("method") not in names:
        want = " or ".join(repr(n) for n in names)
        raise RunError(f"The method saved in {path} is {meta.get('method')!r}, expected {want}; "
                       "load it with its own class or rebuild this method's stage.")
    arrays = {key: read_npy(path / f"{key}.npy") for key in meta["arrays"]}
    return meta["params"], arrays, meta.get("state", {})


class ConceptMethod:
    """Base class of the concept methods: scikit-learn conventions (`__init__` stores
    parameters, `fit` returns self, fitted state ends in `_`)."""

    name: str = "base"
    n_concepts: int

    def fit(self, store, rows: np.ndarray | None = None) -> "ConceptMethod":
        """Fit on the store's `rows` (all rows when None)."""
        raise NotImplementedError

    def predict(self, X) -> np.ndarray:
        """Concept id (int64) of every row of a (N, d) float32 array of raw store vectors."""
        raise NotImplementedError

    def predict_proba(self, X) -> np.ndarray:
        """(N, n_concepts) probabilities of each concept for every row of X."""
        raise NotImplementedError(f"The {self.name} method gives no concept probabilities.")

    def predict_store(self, store, batch_size: int = 8192) -> np.ndarray:
        """Concept id of every store row, in row order, streamed in batches."""
        parts = [self.predict(x.numpy()) for x in store.iter_batches(batch_size, shuffle=False)]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def concept_extra(self) -> dict[str, np.ndarray]:
        """Method-specific arrays for the concept set (none by default)."""
        return {}

    def save(self, path: str | Path) -> None:
        raise NotImplementedError

    @classmethod
    def load(cls, path: str | Path) -> "ConceptMethod":
        raise NotImplementedError

    def check_fitted(self, attr: str) -> None:
        """Raise a clear RunError unless fitted attribute `attr` exists."""
        if getattr(self, attr, None) is None:
            raise RunError(f"This {self.name} method is not fitted yet; call fit(store) first.")

    def check_n_rows(self, n_rows: int) -> None:
        """Raise a clear RunError when there are fewer rows to fit than concepts to find."""
        if n_rows < self.n_concepts:
            raise RunError(f"The {self.name} method cannot find {self.n_concepts} concepts in {n_rows} rows; "
                           "lower n_concepts or fit on more rows.")

    @contextmanager
    def measure_fit(self, n_fit_rows: int) -> Iterator[dict]:
        """Time the block and measure its peak memory into `fit_info_` (PeakMemory's
        peak RSS growth as `peak_rss_mb`, its getrusage upper bound as `peak_rss_upper_mb`).
        The yielded dict is merged in, for method-specific entries."""
        extra: dict = {}
        t0 = time.perf_counter()
        with PeakMemory() as mem:
            yield extra
        self.fit_info_ = {"fit_time_s": round(time.perf_counter() - t0, 4), "peak_rss_mb": round(mem.peak_mb, 2),
                          "peak_rss_upper_mb": round(mem.upper_mb, 2), "n_fit_rows": int(n_fit_rows), **extra}
