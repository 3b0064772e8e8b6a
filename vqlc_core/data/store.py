"""The activation store: one row per word (plus one prediction row per text) of layer-l states.

On disk: fixed-size float16 shards `vectors_00000.npy ...` that are memory-mapped, a parquet
token table in the same row order, and `store.json` (written last). Readers stream shuffled
mini-batches of (N, d) float32 tensors with memory bounded by one shard, never by the corpus.
`ArrayStore` gives an in-memory array the same reading interface (tests, benchmarks).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from vqlc_core.base.runio import RunError, read_json, read_npy, read_parquet, write_json, write_npy

if TYPE_CHECKING:
    import torch

STORE_FILE = "store.json"
FINAL_FILE = "final.npy"  # (n_texts, d) float32: each text's pooled last-layer state, the classifier's features
TOKEN_COLUMNS = ["text_id", "split", "word_index", "word", "kind", "label"]


def fit_set_rows(tokens, max_per_word: int = 20, min_count: int = 1, seed: int = 0) -> np.ndarray:
    """LACOAT's fit set: at most `max_per_word` rows per word type (types seen fewer than
    `min_count` times dropped), taken at random with `seed`, plus every prediction row."""
    rng = np.random.default_rng(seed)
    words = tokens["word"].to_numpy()
    is_pred = (tokens["kind"] == "pred").to_numpy()
    order = rng.permutation(len(tokens))
    keep = np.zeros(len(tokens), dtype=bool)
    keep[is_pred] = True
    seen: dict[str, int] = {}
    counts = tokens.loc[~is_pred, "word"].value_counts()
    for i in order:
        if is_pred[i]:
            continue
        w = words[i]
        if counts.get(w, 0) < min_count:
            continue
        n = seen.get(w, 0)
        if n < max_per_word:
            keep[i] = True
            seen[w] = n + 1
    return np.flatnonzero(keep)


def _sample(rows: np.ndarray, n: int, rng, strata: np.ndarray | None = None) -> np.ndarray:
    """`n` of `rows`, without replacement; with `strata` (one label per row) every stratum keeps
    its share of `n` (largest remainders), so a sampled set has the classes of the whole."""
    if n >= len(rows):
        return rows
    if strata is None:
        return rng.choice(rows, size=n, replace=False)
    labels, counts = np.unique(strata, return_counts=True)
    quota = counts * n / len(rows)
    take = np.floor(quota).astype(int)
    take[np.argsort(-(quota - take), kind="stable")[: n - int(take.sum())]] += 1
    return np.concatenate([rng.choice(rows[strata == c], size=t, replace=False) for c, t in zip(labels, take)])


def budget_fit_set(rows: np.ndarray, is_pred: np.ndarray, max_words: int, max_predictions: int, seed: int = 0,
                   strata: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """The fit set's `rows` (sorted) within two budgets kept apart: at most `max_words` word rows
    and at most `max_predictions` prediction rows (`is_pred`, one flag per row), each a seeded
    sample when over its budget; `strata` (one label per row, e.g. the predicted class) keeps
    the sampled prediction rows stratified. So a data set with many train texts never crowds
    the word rows out, as one shared cap did. Returns the rows and, per kind, how many rows
    there were and how many were kept."""
    rows, is_pred = np.asarray(rows), np.asarray(is_pred, dtype=bool)
    rng = np.random.default_rng(seed)
    words, preds = rows[~is_pred], rows[is_pred]
    kept_words = _sample(words, max_words, rng)
    kept_preds = _sample(preds, max_predictions, rng, None if strata is None else np.asarray(strata)[is_pred])
    info = {"word_rows": int(len(words)), "word_rows_kept": int(len(kept_words)),
            "prediction_rows": int(len(preds)), "prediction_rows_kept": int(len(kept_preds))}
    return np.sort(np.concatenate([kept_words, kept_preds])), info


class _Reader:
    """Batches, samples and reads shared by every store. Subclasses define `_chunks()`:
    (global row offset, row count, loader) pieces in row order; `loader()` returns the piece's
    array, small enough to hold in memory. Readers drop each piece after use: a memory-mapped
    shard kept open would keep every page it ever read resident, and RSS would grow with the
    store (nanoGPT recreates its np.memmap every batch for the same reason)."""

    n_rows: int
    dim: int

    def _chunks(self) -> list[tuple[int, int, Callable[[], np.ndarray]]]:
        raise NotImplementedError

    def iter_batches(
        self, batch_size: int, shuffle: bool = True, seed: int = 0, rows: np.ndarray | None = None
    ) -> Iterator[torch.Tensor]:
        """One epoch of (N, d) float32 tensors; every selected row exactly once.

        Shuffling permutes the shard order and the rows within each shard, so memory is
        bounded by one shard whatever the size of the store.
        """
        import torch

        rng = np.random.default_rng(seed)
        chunks = self._chunks()
        order = rng.permutation(len(chunks)) if shuffle else np.arange(len(chunks))
        selected = None if rows is None else np.zeros(self.n_rows, dtype=bool)
        if selected is not None:
            selected[np.asarray(rows)] = True
        carry: np.ndarray | None = None
        for c in order:
            start, n, load = chunks[c]
            idx = np.arange(n) if selected is None else np.flatnonzero(selected[start : start + n])
            if shuffle:
                idx = rng.permutation(idx)
            if len(idx) == 0:
                continue
            arr = load()
            block = np.asarray(arr[np.sort(idx)] if not shuffle else arr[idx], dtype=np.float32)
            del arr
            if carry is not None:
                block = np.concatenate([carry, block])
                carry = None
            n_full = len(block) // batch_size * batch_size
            for i in range(0, n_full, batch_size):
                yield torch.from_numpy(block[i : i + batch_size])
            if n_full < len(block):
                carry = block[n_full:]
        if carry is not None and len(carry):
            yield torch.from_numpy(carry)

    def read(self, rows: np.ndarray) -> np.ndarray:
        """Rows by global index, as float32, in the order given."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for start, n, load in self._chunks():
            hit = (rows >= start) & (rows < start + n)
            if hit.any():
                out[hit] = load()[rows[hit] - start]
        return out

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """`n` distinct rows drawn uniformly at random (all rows if n >= n_rows), float32."""
        rng = np.random.default_rng(seed)
        if n >= self.n_rows:
            return self.read(np.arange(self.n_rows))
        return self.read(np.sort(rng.choice(self.n_rows, size=n, replace=False)))

    def read_all(self, rows: np.ndarray | None = None) -> np.ndarray:
        return self.read(np.arange(self.n_rows) if rows is None else rows)


class ArrayStore(_Reader):
    """An in-memory (N, d) array with the store's reading interface."""

    def __init__(self, vectors: np.ndarray, tokens=None, chunk_rows: int = 65536):
        self.vectors = np.asarray(vectors)
        self.n_rows, self.dim = self.vectors.shape
        self.tokens = tokens
        self.chunk_rows = chunk_rows

    def _chunks(self):
        return [(s, min(self.chunk_rows, self.n_rows - s), lambda s=s: self.vectors[s : s + self.chunk_rows])
                for s in range(0, self.n_rows, self.chunk_rows)]


def as_store(X):
    """`X` as a store: a store as it is; an (N, d) NumPy array or tensor (on any device) in an
    `ArrayStore`; anything else refused in one sentence."""
    if hasattr(X, "iter_batches") and hasattr(X, "n_rows"):
        return X
    if hasattr(X, "detach"):  # a torch tensor
        X = X.detach().float().cpu().numpy()
    try:
        arr = np.asarray(X, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise RunError(f"Expected a store or an (N, d) array of vectors, got {type(X).__name__}.") from err
    if arr.ndim != 2 or not arr.size:
        raise RunError(f"Expected an (N, d) array of vectors, got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        raise RunError("The vectors hold NaN or infinite values; remove those rows first.")
    return ArrayStore(np.ascontiguousarray(arr))


class ActivationStore(_Reader):
    """A finished store on disk, memory-mapped. Opening checks the shards against store.json."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        meta_path = self.path / STORE_FILE
        if not meta_path.exists():
            raise RunError(f"No finished activation store in {self.path}; run `python -m vqlc_core extract` first.")
        self.meta = read_json(meta_path)
        self.n_rows, self.dim = int(self.meta["n_rows"]), int(self.meta["dim"])
        self.shard_rows = int(self.meta["shard_rows"])
        self._shards = []
        for i, name in enumerate(self.meta["shards"]):
            p = self.path / name
            if not p.exists():
                raise RunError(f"Store shard {name} is missing in {self.path}; rebuild the 'extract' stage.")
            try:
                arr = read_npy(p, mmap=True)
            except ValueError as e:
                raise RunError(f"Store shard {name} is unreadable ({e}); rebuild the 'extract' stage.") from None
            want = min(self.shard_rows, self.n_rows - i * self.shard_rows)
            if arr.shape != (want, self.dim) or arr.dtype != np.float16:
                raise RunError(
                    f"Store shard {name} has the wrong shape: expected ({want}, {self.dim}) float16, "
                    f"got {arr.shape} {arr.dtype}; rebuild the 'extract' stage."
                )
            self._shards.append((i * self.shard_rows, want, lambda p=p: read_npy(p, mmap=True)))
            del arr
        self._tokens = None

    @property
    def tokens(self):
        """The token table (one row per store row): text_id, split, word_index, word, kind, label."""
        if self._tokens is None:
            df = read_parquet(self.path / "tokens.parquet")
            if len(df) != self.n_rows:
                raise RunError(
                    f"Token table has {len(df)} rows, expected {self.n_rows}; rebuild the 'extract' stage."
                )
            self._tokens = df
        return self._tokens

    def _chunks(self):
        return self._shards

    def final_features(self) -> np.ndarray:
        """Each text's pooled last-layer representation (n_texts, d), in text order, from the
        extraction's own forward pass: the classifier's features."""
        path = self.path / FINAL_FILE
        if not path.exists():
            raise RunError(f"The store in {self.path} has no {FINAL_FILE}; rebuild the 'extract' stage.")
        return read_npy(path)

    def rows_where(self, split: str | None = None, kind: str | None = None) -> np.ndarray:
        t = self.tokens
        mask = np.ones(len(t), dtype=bool)
        if split is not None:
            mask &= (t["split"] == split).to_numpy()
        if kind is not None:
            mask &= (t["kind"] == kind).to_numpy()
        return np.flatnonzero(mask)


class ShardWriter:
    """Appends float16 rows and writes them out as fixed-size shards, each atomically."""

    def __init__(self, path: Path, dim: int, shard_rows: int, n_written_shards: int = 0):
        self.path, self.dim, self.shard_rows = Path(path), dim, shard_rows
        self.n_shards = n_written_shards
        self._buf: list[np.ndarray] = []
        self._buf_rows = 0

    @staticmethod
    def shard_name(i: int) -> str:
        return f"vectors_{i:05d}.npy"

    def append(self, rows: np.ndarray) -> list[int]:
        """Add rows; return the indices of shards completed by this call."""
        self._buf.append(np.asarray(rows, dtype=np.float16))
        self._buf_rows += len(rows)
        done = []
        while self._buf_rows >= self.shard_rows:
            block = np.concatenate(self._buf)
            self._flush(block[: self.shard_rows])
            rest = block[self.shard_rows :]
            self._buf, self._buf_rows = ([rest] if len(rest) else []), len(rest)
            done.append(self.n_shards - 1)
        return done

    def close(self) -> None:
        if self._buf_rows:
            self._flush(np.concatenate(self._buf))
            self._buf, self._buf_rows = [], 0

    def _flush(self, block: np.ndarray) -> None:
        write_npy(self.path / self.shard_name(self.n_shards), block)
        self.n_shards += 1


def finalize_store(path: Path, meta: dict) -> None:
    write_json(Path(path) / STORE_FILE, meta)
