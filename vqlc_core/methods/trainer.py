"""The one training loop of the methods that are a torch module (VQLC and the SAE): build the
module, resume from a checkpoint or prepare a fresh fit, run the epochs over mini-batches
streamed from the store with a progress bar, checkpoint after every epoch, and save and load
the module through one path. A method supplies its module (`_build`), its optimiser, how a
fresh fit starts (`_begin`) and one epoch (`_epoch`). `on_step` watches a fit as it trains.

A method with `stop_tol` > 0 stops by convergence: every `check_every` optimiser steps its
concepts of a fixed seeded probe of the fit rows (`PROBE_ROWS`) are compared with those of the
previous check, and the fit ends, mid-epoch if so, once fewer than `stop_tol` of them changed;
the epochs `epochs_for` gives are then the most it trains. With `epochs` set, every step trains."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from vqlc_core.base import checkpoint, distributed
from vqlc_core.methods.base import ConceptMethod

PROBE_ROWS = 2048  # fit rows whose concepts are compared between convergence checks
# Torch threads a fit on the CPU trains with. A step's matrices (256 rows of 384) are too small for
# a second thread to pay, and beside any other busy process two threads spin: a VQLC step took
# 20 ms on one thread against 130 ms on two on a 2-core machine running two other jobs, where the
# default build's VQLC fit (two threads) took 80.8 s against K-Means' 46.4 s.
FIT_THREADS = 1


@contextmanager
def torch_threads(n: int | None):
    """Torch's intra-op threads set to `n` inside the block (unchanged for None), restored after."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def on_step(method: "ModuleMethod", fn: Callable[["ModuleMethod", int], None]):
    """Inside the block, `method`'s fits call `fn(method, step)` at step 0 (the fresh fit prepared:
    normalisation and initial codes, nothing trained) and after every optimiser step (VQLC's).
    The model is in eval mode during the call and the torch RNG state is restored after it, so a
    hook that only reads the model (predicts, scores) leaves the fit as it would have been; the
    hook's own time counts in the fit's. bench/time_to_quality.py measures quality against time
    with it."""
    method._step_hooks = [*getattr(method, "_step_hooks", []), fn]
    try:
        yield method
    finally:
        method._step_hooks.remove(fn)


class ModuleMethod(ConceptMethod):
    """A method whose fitted state is one torch module (`model_`, made by `_build(dim)`) with its
    training history (`history_`, one entry per epoch)."""

    # Parameters that may change between a killed fit and its resume without changing the result.
    resumable: tuple[str, ...] = ("epochs", "progress", "checkpoint_dir")
    epochs: int | None
    min_steps: int
    batch_size: int
    checkpoint_dir: str | None
    progress: bool
    stop_tol: float = 0.0  # 0: train every step of every epoch
    check_every: int = 40

    # --- what a method supplies ---------------------------------------------------------------
    def _build(self, dim: int):
        raise NotImplementedError

    def _validate(self) -> None:
        """Raise a one-sentence error for parameters that cannot be fitted."""

    def _prepare(self) -> None:
        """Import torch's optimiser machinery before the clock: a process's first optimiser imports
        torch._dynamo (about 4 s on a loaded 2-core machine, once per process), which the
        build's first seed of VQLC used to count as fit time."""
        import torch._dynamo  # noqa: F401

    def _optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def _begin(self, store, rows: np.ndarray) -> None:
        """Prepare a fresh fit (not a resumed one): normalisation statistics, initial codes."""

    def _epoch(self, store, rows: np.ndarray, opt: torch.optim.Optimizer, epoch: int, bar) -> dict:
        """Train one pass over `rows`; the epoch's history entry (besides its number)."""
        raise NotImplementedError

    def _fit_info(self) -> dict:
        return {}

    def _step_done(self, step: int) -> None:
        """Call the `on_step` hooks after optimiser step `step` (0: the prepared, untrained fit)."""
        for fn in getattr(self, "_step_hooks", ()):
            with torch.random.fork_rng(devices=[]):
                self.model_.eval()
                fn(self, step)
            self.model_.train()

    def _prepare_probe(self, store, rows: np.ndarray, codes: torch.Tensor | None) -> None:
        """The convergence probe: a seeded sample of the fit rows and their concepts at the last
        check (`codes`, from a checkpoint, or None on a fresh fit)."""
        self._probe, self._probe_codes, self.changes_ = None, codes, []
        if self.stop_tol > 0:  # measured with `epochs` set too (a fit killed at an epoch resumes alike)
            pick = np.random.default_rng([self.seed, len(rows)]).choice(rows, min(PROBE_ROWS, len(rows)), replace=False)
            self._probe = store.read(np.sort(pick))

    def _after_step(self, step: int) -> bool:
        """Call the `on_step` hooks after optimiser step `step`; at every `check_every`-th step
        with a probe, whether the fit has converged (rank 0 decides, every rank follows)."""
        self._step_done(step)
        if self._probe is None or step % self.check_every:
            return False
        with torch.random.fork_rng(devices=[]):
            codes = torch.as_tensor(self.predict(self._probe))
        self.model_.train()
        prev, self._probe_codes = self._probe_codes, codes
        if prev is None:
            return False
        changed = float((codes != prev).double().mean())
        self.changes_.append((step, changed))
        stop = torch.tensor([float(changed < self.stop_tol and self.epochs is None)],
                            device=getattr(self, "device", "cpu"))  # on the rank's device, for nccl
        distributed.collectives().broadcast(stop)
        return bool(stop.item())

    # --- the loop -------------------------------------------------------------------------------
    def epochs_for(self, n_rows: int) -> int:
        """Epochs of a fit on n_rows: `epochs` when set, else enough for `min_steps` optimiser
        steps (at most 100; at a million rows one pass is plenty); with `stop_tol` the most it
        trains."""
        if self.epochs is not None:
            return int(self.epochs)
        return max(1, min(100, math.ceil(self.min_steps * self.batch_size / max(n_rows, 1))))

    def _fit(self, store, rows: np.ndarray) -> dict:
        """Train on the store's `rows`, resuming from a checkpoint when there is one (`fit`
        times it and returns self), with `FIT_THREADS` torch threads on the CPU. Only rank 0
        writes checkpoints."""
        with torch_threads(FIT_THREADS if str(getattr(self, "device", "cpu")).startswith("cpu") else None):
            return self._fit_loop(store, rows)

    def _fit_loop(self, store, rows: np.ndarray) -> dict:
        self._validate()
        self.n_features_in_ = store.dim
        self.model_ = self._build(store.dim)
        opt = self._optimizer()
        params = {**self.get_params(), "dim": self.n_features_in_}
        ckpt = (checkpoint.load(self.checkpoint_dir, self.model_, opt, params, self.name, may_change=self.resumable)
                if self.checkpoint_dir else None)
        if ckpt is None:
            start, self.history_ = 0, []
            self._begin(store, rows)
            self._prepare_probe(store, rows, None)
            self._step_done(0)
        else:  # a checkpoint that already trained `epochs`, or converged, is kept as is
            start, self.history_ = ckpt.epoch, ckpt.history
            self._prepare_probe(store, rows, ckpt.tensors.get("probe_codes"))
        n = len(rows)
        self.n_epochs_ = self.epochs_for(n)
        if self.history_ and self.history_[-1].get("converged"):
            start = self.n_epochs_
        steps = math.ceil(n / self.batch_size)
        bar = tqdm(total=self.n_epochs_ * steps, initial=min(start, self.n_epochs_) * steps, desc=self.name,
                   disable=None if self.progress and distributed.is_main() else True, unit="step")
        for epoch in range(start, self.n_epochs_):
            self.model_.train()
            self.history_.append({"epoch": epoch + 1, **self._epoch(store, rows, opt, epoch, bar)})
            if self.checkpoint_dir and distributed.is_main():  # every rank holds the same model
                probe = {} if self._probe_codes is None else {"probe_codes": self._probe_codes}
                checkpoint.save(self.checkpoint_dir, self.model_, opt, epoch + 1, self.history_, params, tensors=probe)
            if self.history_[-1].get("converged"):
                break
        bar.close()
        self.model_.eval()
        return self._fit_info()

    # --- save and load --------------------------------------------------------------------------
    def _tensors(self) -> dict:
        """The module's state_dict: weights, buffers (codebooks, normalisation, firing counts)."""
        self.check_fitted("model_")
        return dict(self.model_.state_dict())

    def _state(self) -> dict:
        return {"dim": self.n_features_in_, "history": self.history_, "n_epochs": getattr(self, "n_epochs_", None)}

    def _restore(self, tensors: dict, state: dict) -> None:
        self.n_features_in_ = int(state["dim"])
        self.model_ = self._build(self.n_features_in_)
        self.model_.load_state_dict(tensors)
        self.model_.eval()
        self.history_ = list(state["history"])
        self.n_epochs_ = state.get("n_epochs")
