"""The concept set: one format for every concept method (VQLC, K-Means, LACOAT).

A concept set holds an assignment for every row of the store, a concept vector per concept in
the model's hidden space (the mean of its members' states), method-specific arrays (VQLC's
code vectors and aggregated encodings), and a per-concept summary: size, top words with
counts, class distribution, dominant class, purity and example contexts.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .runio import RunError, read_json, read_npy, read_parquet, write_json, write_npy, write_parquet


def concept_means(store, assignments: np.ndarray, n_concepts: int, batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Mean store vector and member count per concept, streamed over the store in row order."""
    sums = torch.zeros(n_concepts, store.dim, dtype=torch.float64)
    counts = np.bincount(assignments, minlength=n_concepts)[:n_concepts]
    start = 0
    a = torch.as_tensor(np.asarray(assignments, dtype=np.int64))
    for x in store.iter_batches(batch_size, shuffle=False):
        sums.index_add_(0, a[start : start + len(x)], x.double())
        start += len(x)
    means = sums / torch.as_tensor(np.maximum(counts, 1), dtype=torch.float64)[:, None]
    return means.float().numpy(), counts


def summarize(tokens: pd.DataFrame, assignments: np.ndarray, n_concepts: int, class_names: list[str],
              top_k: int = 30, n_examples: int = 12, seed: int = 0) -> pd.DataFrame:
    """Per-concept summary table from the token table and the assignment of every row."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "concept": assignments,
        "word": tokens["word"].to_numpy(),
        "kind": tokens["kind"].to_numpy(),
        "label": tokens["label"].to_numpy(),
        "text_id": tokens["text_id"].to_numpy(),
        "word_index": tokens["word_index"].to_numpy(),
    })
    rows = []
    groups = dict(tuple(df.groupby("concept", sort=True)))
    for k in range(n_concepts):
        g = groups.get(k)
        if g is None or len(g) == 0:
            rows.append({"concept": k, "size": 0, "n_pred": 0, "top_words": "[]", "class_counts": "{}",
                         "dominant_class": "", "purity": 0.0, "examples": "[]"})
            continue
        words = Counter(w.lower() for w in g.loc[g["kind"] == "word", "word"])
        classes = Counter(class_names[int(c)] if 0 <= int(c) < len(class_names) else str(c) for c in g["label"])
        dominant, top = classes.most_common(1)[0]
        pick = rng.choice(len(g), size=min(n_examples, len(g)), replace=False)
        ex = g.iloc[np.sort(pick)][["text_id", "word_index"]].to_numpy().tolist()
        rows.append({
            "concept": k,
            "size": int(len(g)),
            "n_pred": int((g["kind"] == "pred").sum()),
            "top_words": json.dumps(words.most_common(top_k)),
            "class_counts": json.dumps(dict(classes)),
            "dominant_class": dominant,
            "purity": float(top / len(g)),
            "examples": json.dumps(ex),
        })
    return pd.DataFrame(rows)


@dataclass
class ConceptSet:
    """Concepts of one method over one store. `vectors` live in the model's hidden space."""

    method: str
    assignments: np.ndarray  # (n_rows,) concept id of every store row
    vectors: np.ndarray  # (K, d) mean hidden state of each concept's members
    summary: pd.DataFrame  # one row per concept, see `summarize`
    class_names: list[str]
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. VQLC "codes", "encodings"
    info: dict = field(default_factory=dict)  # fit time, peak memory, measures

    @property
    def n_concepts(self) -> int:
        return len(self.vectors)

    @classmethod
    def from_assignments(cls, method: str, store, assignments: np.ndarray, n_concepts: int,
                         class_names: list[str], extra: dict | None = None, info: dict | None = None,
                         seed: int = 0) -> "ConceptSet":
        assignments = np.asarray(assignments, dtype=np.int32)
        if len(assignments) != store.n_rows:
            raise ValueError(f"expected {store.n_rows} assignments, got {len(assignments)}")
        vectors, _ = concept_means(store, assignments, n_concepts)
        summary = summarize(store.tokens, assignments, n_concepts, class_names, seed=seed)
        return cls(method, assignments, vectors, summary, list(class_names), dict(extra or {}), dict(info or {}))

    def top_words(self, k: int, n: int = 10) -> list[tuple[str, int]]:
        return [tuple(x) for x in json.loads(self.summary.at[k, "top_words"])[:n]]

    def label(self, k: int, n: int = 3) -> str:
        """A short human name for concept k: its top words."""
        words = [w for w, _ in self.top_words(k, n)]
        return f"c{k}: " + (", ".join(words) if words else "(prediction rows)")

    def save(self, path: str | Path) -> None:
        path = Path(path)
        write_npy(path / "assignments.npy", self.assignments)
        write_npy(path / "vectors.npy", self.vectors.astype(np.float32))
        for name, arr in self.extra.items():
            write_npy(path / f"extra_{name}.npy", np.asarray(arr))
        write_parquet(path / "summary.parquet", self.summary)
        write_json(path / "concepts.json", {"method": self.method, "n_concepts": self.n_concepts,
                                            "n_rows": int(len(self.assignments)), "dim": int(self.vectors.shape[1]),
                                            "class_names": self.class_names, "extra": sorted(self.extra),
                                            "info": self.info})

    @classmethod
    def load(cls, path: str | Path, n_rows: int | None = None, dim: int | None = None) -> "ConceptSet":
        path = Path(path)
        if not (path / "concepts.json").exists():
            raise RunError(f"No concept set in {path}; rebuild this method's stage.")
        meta = read_json(path / "concepts.json")
        assignments = read_npy(path / "assignments.npy")
        vectors = read_npy(path / "vectors.npy")
        if n_rows is not None and len(assignments) != n_rows:
            raise RunError(f"Concept set {meta['method']} covers {len(assignments)} rows, expected {n_rows}; "
                           "rebuild this method's stage.")
        if dim is not None and vectors.shape[1] != dim:
            raise RunError(f"Concept vectors of {meta['method']} have dimension {vectors.shape[1]}, expected {dim}; "
                           "rebuild this method's stage.")
        extra = {name: read_npy(path / f"extra_{name}.npy") for name in meta.get("extra", [])}
        return cls(meta["method"], assignments, vectors, read_parquet(path / "summary.parquet"),
                   meta["class_names"], extra, meta.get("info", {}))
