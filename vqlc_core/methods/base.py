"""The concept methods: the one estimator interface they share (their registry is
`registry.py`). A method fits on rows of an activation store, maps (N, d) vectors to
concept ids, measures its fit time and peak memory here, and saves itself as safetensors + JSON.
"""

from __future__ import annotations

import inspect
import resource
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import psutil
import torch

from vqlc_core.base.runio import RunError, read_json, read_safetensors, write_json, write_safetensors
from vqlc_core.data.store import as_store
from vqlc_core.methods.metrics import perplexity_from_counts
from vqlc_core.methods.registry import REGISTRY, method_class

METHOD_FILE = "method.json"
WEIGHTS_FILE = "method.safetensors"
FORMAT_VERSION = 2


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


def display_name(name: str) -> str:
    """How tables and pages name method `name`; an unknown name as it is.

    Examples:
        >>> vq.display_name("kmeans"), vq.display_name("mine")
        ('K-Means', 'mine')
    """
    return method_class(name).display_name if name in REGISTRY else name


def softmax_neg_distances(X: np.ndarray, C: np.ndarray, temperature: float | np.ndarray | None = None) -> np.ndarray:
    """(N, K) softmax of -||x - c||² / t over the rows of C. With no temperature, t is each row's
    smallest squared distance (the typical distance of a point to its concept): scale-free and
    one row at a time, so a row's probabilities do not depend on the rest of the batch."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    d2 = np.maximum((X * X).sum(1)[:, None] - 2.0 * X @ C.T + (C * C).sum(1)[None, :], 0.0)  # (N, K)
    t = np.maximum(d2.min(1, keepdims=True), 1e-12) if temperature is None else temperature
    logits = -d2 / t
    logits -= logits.max(1, keepdims=True)
    p = np.exp(logits)
    return (p / p.sum(1, keepdims=True)).astype(np.float32)


class ConceptMethod:
    """Base class of the concept methods, with scikit-learn conventions: `__init__` only stores
    its parameters (so `get_params` reads them from its signature), `fit` returns self, fitted
    state ends in `_`.

    A subclass implements `_fit(store, rows) -> dict` (extra entries for `fit_info_`),
    `predict`, `predict_proba`, and `_tensors() / _restore(tensors, state)` for save and load;
    `transform` (the space where concepts are assigned) is the raw space unless overridden.

    What the rest of vqlc reads from the class: `display_name` (tables and pages), `Options` (a
    dataclass of the method's build options, fields made with `base.options.opt`; the build's
    settings, the command line and the stage's resume guard derive from it, each field appearing
    as `<name>_<field>`), and its capabilities (`encodes`: it gives every row graded activations
    of several features through `encode`, as the SAE does). `from_config` builds an estimator
    from the build's MethodsConfig: by default with K, the seed and the options as keywords.
    """

    name: str = "base"
    """The method's name in the build's settings, the run folder and the registry ('vqlc')."""
    display_name: str = "base"
    """The method's name in tables and pages ('VQLC')."""
    saved_names: tuple[str, ...] = ()  # the names `load` accepts, when not just `name`
    """The names a saved model may carry for `load` to accept it, when not just `name`."""
    Options: type | None = None
    """The dataclass of the method's build options (`--<name>-<field>`), or None."""
    encodes: bool = False
    """Whether `encode` gives every row graded activations of several features (the SAE)."""
    n_concepts: int
    """K, the number of concepts the method finds."""
    resumable: tuple[str, ...] = ()
    """The parameters that may change when an interrupted fit resumes from its checkpoint."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.Options is not None and isinstance(cls.__dict__.get("name"), str):
            cls.Options.flag_prefix = cls.name  # its fields are `<name>_<field>` in the build's settings

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The flat setting names of this method's options (`<name>_<field>`)."""
        return tuple(f"{cls.name}_{f.name}" for f in fields(cls.Options)) if cls.Options else ()

    @classmethod
    def from_config(cls, mcfg, seed: int, workdir: Path) -> "ConceptMethod":
        """A fresh estimator with the build's parameters; `workdir` is its folder in the run."""
        return cls(n_concepts=mcfg.n_concepts, seed=seed, **mcfg.options_of(cls.name))

    @classmethod
    def for_predictions(cls, mcfg, seed: int, workdir: Path) -> "ConceptMethod":
        """A fresh estimator for the prediction rows alone (`split.SplitConcepts`), with
        `mcfg.n_concepts` prediction concepts: by default `from_config`."""
        return cls.from_config(mcfg, seed, workdir)

    @classmethod
    def fit_rows(cls, mcfg, store, fitset: np.ndarray) -> np.ndarray:
        """The store rows a build fits this method on: the shared fit set unless overridden."""
        return fitset

    def get_params(self) -> dict:
        """The constructor's parameters, as stored."""
        return {k: getattr(self, k) for k in inspect.signature(type(self).__init__).parameters if k != "self"}

    # --- fit and predict --------------------------------------------------------------------
    def fit(self, store, rows: np.ndarray | None = None) -> "ConceptMethod":
        """Fit on the store's `rows` (all rows when None), or on an (N, d) NumPy array or tensor
        of vectors as scikit-learn's estimators are (`vq.VQLC(n_concepts=400).fit(X)`); returns
        self. Fit time and peak memory go to `fit_info_`."""
        store = as_store(store)
        rows = np.arange(store.n_rows) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        self.check_n_rows(len(rows))
        self._prepare()  # one-time imports, before the clock: they are no part of fitting
        t0 = time.perf_counter()
        with PeakMemory() as mem:
            extra = self._fit(store, rows) or {}
        self.fit_info_ = {"fit_time_s": round(time.perf_counter() - t0, 4), "peak_rss_mb": round(mem.peak_mb, 2),
                          "peak_rss_upper_mb": round(mem.upper_mb, 2), "n_fit_rows": int(len(rows)), **extra}
        return self

    def _prepare(self) -> None:
        """What a process does once before its first fit of this method (e.g. library imports),
        kept out of `fit_time_s`: scikit-learn's estimators are imported with the module, torch's
        optimiser machinery on first use."""

    def _fit(self, store, rows: np.ndarray) -> dict:
        raise NotImplementedError

    def predict(self, X) -> np.ndarray:
        """Concept id (int64) of every row of a (N, d) float32 array of raw store vectors."""
        raise NotImplementedError

    def predict_proba(self, X) -> np.ndarray:
        """(N, n_concepts) probabilities of each concept for every row of X."""
        raise NotImplementedError

    def predict_predictions(self, X) -> np.ndarray:
        """Concept ids of prediction representations (pooled states): `predict`, as one concept set
        serves every row (`split.SplitConcepts` gives them concepts of their own)."""
        return self.predict(X)

    def predict_proba_predictions(self, X) -> np.ndarray:
        """(N, n_concepts) concept probabilities of prediction representations: `predict_proba`."""
        return self.predict_proba(X)

    def transform(self, X) -> np.ndarray:
        """The vectors this method compares with its concepts: raw store vectors by default."""
        return np.asarray(X, dtype=np.float32)

    def predict_store(self, store, batch_size: int = 8192) -> np.ndarray:
        """Concept id of every store row, in row order, streamed in batches."""
        parts = [self.predict(x.numpy()) for x in store.iter_batches(batch_size, shuffle=False)]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def score_store(self, store, rows: np.ndarray | None = None, batch_size: int = 8192) -> dict:
        """Streamed measures over store rows: concept perplexity and dead concepts."""
        counts = np.zeros(self.n_concepts, dtype=np.int64)
        for x in store.iter_batches(batch_size, shuffle=False, rows=rows):
            counts += np.bincount(self.predict(x.numpy()), minlength=self.n_concepts)[: self.n_concepts]
        return {"perplexity": perplexity_from_counts(counts), "dead_codes": int((counts == 0).sum())}

    def concept_extra(self) -> dict[str, np.ndarray]:
        """Method-specific arrays for the concept set (none by default)."""
        return {}

    def concept_centres(self, store, rows: np.ndarray) -> np.ndarray | None:
        """(K, d) the method's own centre of each concept in the model's space, when it has one
        (the K-Means centroids, VQLC's decoded codes); None: the mean of its fit rows serves."""
        return None

    # --- save and load: safetensors + JSON, one format for every method -----------------------
    def _tensors(self) -> dict:
        """The fitted state as named arrays or tensors."""
        raise NotImplementedError

    def _state(self) -> dict:
        """The fitted state that is not an array (JSON)."""
        return {}

    def _restore(self, tensors: dict, state: dict) -> None:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        """Write `method.safetensors` (fitted arrays) and then `method.json` into folder `path`."""
        import torch

        path = Path(path)
        tensors = {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
                   for k, v in self._tensors().items()}
        write_safetensors(path / WEIGHTS_FILE, tensors)
        write_json(path / METHOD_FILE, {"method": self.name, "format_version": FORMAT_VERSION,
                                        "params": self.get_params(),
                                        "state": {**self._state(), "fit_info": getattr(self, "fit_info_", {})}})

    @classmethod
    def load(cls, path: str | Path) -> "ConceptMethod":
        """A fitted method from a folder written by `save`."""
        path = Path(path)
        if not (path / METHOD_FILE).exists():
            raise RunError(f"No fitted {cls.name} method in {path}; rebuild this method's stage.")
        meta = read_json(path / METHOD_FILE)
        if meta.get("format_version") != FORMAT_VERSION:
            raise RunError(f"The method in {path} has format {meta.get('format_version')}, expected "
                           f"{FORMAT_VERSION}; rebuild this method's stage.")
        names = cls.saved_names or (cls.name,)
        if meta.get("method") not in names:
            raise RunError(f"The method saved in {path} is {meta.get('method')!r}, expected "
                           f"{' or '.join(repr(n) for n in names)}; load it with its own class or rebuild this "
                           "method's stage.")
        # a loaded method runs on the CPU, wherever it was trained (its arrays are small)
        self = cls(**{k: ("cpu" if k == "device" else v) for k, v in meta["params"].items()})
        state = dict(meta.get("state", {}))
        self.fit_info_ = state.pop("fit_info", {})
        self._restore(read_safetensors(path / WEIGHTS_FILE), state)
        return self

    # --- checks ---------------------------------------------------------------------------
    def check_fitted(self, attr: str) -> None:
        """Raise a clear RunError unless fitted attribute `attr` exists."""
        if getattr(self, attr, None) is None:
            raise RunError(f"This {self.name} method is not fitted yet; call fit(store) first.")

    def fitted_tensor(self, X) -> torch.Tensor:
        """`X` (an (N, d) array or tensor) as float32 rows of the width the fitted model takes, for
        a torch method's forward; refused in one sentence otherwise."""
        self.check_fitted("model_")
        X = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X, dtype=torch.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise RunError(f"{self.display_name} expects an (N, {self.n_features_in_}) array, got shape {tuple(X.shape)}.")
        return X

    def check_n_rows(self, n_rows: int) -> None:
        """Raise a clear RunError when there are fewer rows to fit than concepts to find."""
        if n_rows < self.n_concepts:
            raise RunError(f"The {self.name} method cannot find {self.n_concepts} concepts in {n_rows} rows; "
                           "lower --n-concepts or fit on more rows.")
