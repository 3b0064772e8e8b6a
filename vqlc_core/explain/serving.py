"""Explanations for many users of one dashboard server: dynamic batching, first come first
served.

Every session's explanation or ablation goes into one FIFO queue; one worker thread takes what
has arrived (the first request, then whatever else is already queued or arrives within
`max_wait_s`, up to `max_batch`) and computes it together: one padded forward, one batched
Integrated Gradients pass, one ablation forward (`Explainer.explain_many`, `ablate_many`).
Requests are served in arrival order, so no session can overtake another, and a request whose
session left before the worker reached it is dropped without being computed.

With `stats_path` (or $VQLC_SERVE_STATS) set, every answered request appends one JSON line: its
kind, queue wait, compute time of its batch, batch size and the worker's CPU time for that batch.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import Any, Callable
from vqlc_core.base.runio import RunError

STATS_ENV = "VQLC_SERVE_STATS"


class SessionLeft(Exception):
    """The session that asked left before its answer came; nothing was computed for it."""


@dataclass
class _Request:
    kind: str  # "explain" or "ablate"
    args: tuple
    future: Future = field(default_factory=Future)
    t_submit: float = field(default_factory=time.perf_counter)


class Batcher:
    """A FIFO queue of requests and one worker thread that computes them in batches.

    compute: {kind: fn(list of args tuples) -> list of results}. When a batch raises, its
        requests are computed again one at a time, so a bad input fails alone.
    max_batch: most requests in one batch. max_wait_s: how long the worker waits for more
        requests after the first of a batch (the bounded wait of dynamic batching)."""

    def __init__(self, compute: dict[str, Callable[[list[tuple]], list]], max_batch: int = 16,
                 max_wait_s: float = 0.005, stats_path: str | os.PathLike | None = None):
        if max_batch < 1:
            raise RunError(f"max_batch must be at least 1, got {max_batch}.")
        self.compute, self.max_batch, self.max_wait_s = dict(compute), int(max_batch), float(max_wait_s)
        self.stats_path = stats_path if stats_path is not None else os.environ.get(STATS_ENV) or None
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._start_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self.batches: list[int] = []  # size of every batch computed (for tests and benchmarks)
        self.dropped = 0  # requests whose session left before they were computed

    # --- the sessions' side ---------------------------------------------------------------
    def submit(self, kind: str, *args) -> Future:
        """Queue a request; its Future gets the result (or the exception)."""
        if kind not in self.compute:
            raise RunError(f"Unknown request kind '{kind}'; choose one of {', '.join(self.compute)}.")
        self._ensure_worker()
        req = _Request(kind, args)
        self._queue.put(req)
        return req.future

    def ask(self, kind: str, *args, alive: Callable[[], bool] | None = None, poll_s: float = 0.2) -> Any:
        """Submit and wait for the answer; while waiting, check `alive()` every `poll_s` and,
        once it says the asker has gone, withdraw the request (raises SessionLeft)."""
        fut = self.submit(kind, *args)
        while True:
            try:
                return fut.result(timeout=poll_s if alive is not None else None)
            except TimeoutError:
                if not alive():
                    fut.cancel()  # the worker skips it if it has not started it
                    raise SessionLeft("The session left before its answer was computed.") from None
            except CancelledError:
                raise SessionLeft("The session left before its answer was computed.") from None

    # --- the worker ---------------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._loop, daemon=True, name="vqlc-batcher")
                self._worker.start()

    def _take_batch(self) -> list[_Request]:
        batch = [self._queue.get()]
        deadline = time.perf_counter() + self.max_wait_s
        while len(batch) < self.max_batch:
            try:
                batch.append(self._queue.get(timeout=max(0.0, deadline - time.perf_counter())))
            except queue.Empty:
                break
        return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            live = [r for r in batch if r.future.set_running_or_notify_cancel()]
            self.dropped += len(batch) - len(live)
            for kind in dict.fromkeys(r.kind for r in live):  # kinds in order of first arrival
                self._run([r for r in live if r.kind == kind], kind)

    def _compute(self, kind: str, batch: list[tuple]) -> list:
        """The batch's results; when it raises, each request alone (its own result or error)."""
        try:
            return list(self.compute[kind](batch))
        except Exception as e:
            if len(batch) == 1:
                return [e]
            return [self._compute(kind, [args])[0] for args in batch]

    def _run(self, reqs: list[_Request], kind: str) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        results = self._compute(kind, [r.args for r in reqs])
        t1, c1 = time.perf_counter(), time.thread_time()
        self.batches.append(len(reqs))
        if self.stats_path:  # before the answers, so an answered request is always recorded
            lines = [json.dumps({"kind": kind, "wait_s": round(t0 - r.t_submit, 6), "compute_s": round(t1 - t0, 6),
                                 "cpu_s": round(c1 - c0, 6), "batch": len(reqs)}) for r in reqs]
            with open(self.stats_path, "a") as f:
                f.write("\n".join(lines) + "\n")
        for r, res in zip(reqs, results):
            if isinstance(res, Exception):
                r.future.set_exception(res)
            else:
                r.future.set_result(res)


class ExplainService:
    """An Explainer shared by every session of a server, behind one Batcher: `explain(text)`
    and `ablate(text, method, ids)` return the `to_dict()` of what `Explainer.explain` and
    `Explainer.ablate` return (plain JSON, for the pages' caches), computed in batches with the
    other sessions' requests."""

    def __init__(self, explainer, max_batch: int = 16, max_wait_s: float = 0.005, stats_path=None):
        self.explainer = explainer
        self.batcher = Batcher({
            "explain": lambda batch: [e.to_dict() for e in explainer.explain_many(
                [a[0] for a in batch], [a[1] if len(a) > 1 else None for a in batch],
                [a[2] if len(a) > 2 else False for a in batch], [a[3] if len(a) > 3 else None for a in batch])],
            "ablate": lambda batch: [a.to_dict() for a in explainer.ablate_many(batch)],
        }, max_batch=max_batch, max_wait_s=max_wait_s, stats_path=stats_path)

    def explain(self, text: str, alive: Callable[[], bool] | None = None, attribute=None, shapley: bool = False,
                intervention: str | None = None) -> dict:
        """`Explainer.explain(text, attribute, shapley, intervention)` as a dict; `attribute`: the
        methods whose concept attribution it computes (None: every method)."""
        return self.batcher.ask("explain", text, None if attribute is None else tuple(attribute), bool(shapley),
                                intervention, alive=alive)

    def ablate(self, text: str, method: str, ids, alive: Callable[[], bool] | None = None,
               intervention: str | None = None) -> dict:
        """`Explainer.ablate(text, method, ids, intervention=intervention)` as a dict."""
        return self.batcher.ask("ablate", text, method, list(ids), True, intervention, alive=alive)
