"""A feature's top-activating contexts, for concept methods whose rows carry graded activations
(the SAE): the train words on which each feature is most active, and for each of them its
sentence with the feature's activation on every word, as the Concepts page shows them.

The table of top rows needs the whole store encoded, so the `maps` stage writes it once
(methods/<m>/top_activations.parquet); a context's per-word activations take one encoding of
that sentence's stored rows and are computed when a feature is opened.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from vqlc_core.base.runio import read_parquet, write_parquet
from vqlc_core.data.corpus import sentence_words, word_spans

TOP_FILE = "top_activations.parquet"
COLUMNS = ["concept", "rank", "row", "activation"]


def _keep_top(latent: np.ndarray, act: np.ndarray, row: np.ndarray, n: int):
    """The `n` largest activations per latent (ties: lower row first), sorted by latent, then
    activation descending."""
    order = np.lexsort((row, -act, latent))
    latent, act, row = latent[order], act[order], row[order]
    first = np.r_[0, np.flatnonzero(np.diff(latent)) + 1]
    rank = np.arange(len(latent)) - np.repeat(first, np.diff(np.r_[first, len(latent)]))
    keep = rank < n
    return latent[keep], act[keep], row[keep], rank[keep]


def top_activations(method, store, rows: np.ndarray, n: int = 10, batch_size: int = 8192) -> pd.DataFrame:
    """For every feature that fires on any of the store's `rows`: the `n` rows where it is most
    active, as concept, rank (0 = most active), row, activation; streamed over the store, so
    memory holds one batch and the running top `n` per feature."""
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    keep = (np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64))
    start = 0
    for x in store.iter_batches(batch_size, shuffle=False, rows=rows):
        acts, idx = method.encode(x)
        batch_rows = np.repeat(rows[start : start + len(x)], acts.shape[1])
        start += len(x)
        fired = acts.reshape(-1) > 0
        latent = np.concatenate([keep[0], idx.reshape(-1)[fired]])
        act = np.concatenate([keep[1], acts.reshape(-1)[fired]])
        row = np.concatenate([keep[2], batch_rows[fired]])
        keep = _keep_top(latent, act, row, n)[:3]
    latent, act, row, rank = _keep_top(*keep, n)
    return pd.DataFrame({"concept": latent.astype(np.int64), "rank": rank.astype(np.int64),
                         "row": row.astype(np.int64), "activation": act.astype(np.float32)}, columns=COLUMNS)


def write_top(run, method_name: str, n: int = 10) -> int:
    """Write the top-activation table of a built method with activations (train word rows only:
    the rows that shape concepts); returns the number of features in it, 0 for other methods."""
    method = run.method(method_name)
    if not method.encodes:  # the method's declared capability: graded activations through `encode`
        return 0
    store = run.store
    t = store.tokens
    rows = np.flatnonzero(((t["split"] == "train") & (t["kind"] == "word")).to_numpy())
    top = top_activations(method, store, rows, n=n)
    write_parquet(run.dir / "methods" / method_name / TOP_FILE, top)
    return int(top["concept"].nunique())


def read_top(run_dir, method_name: str) -> pd.DataFrame | None:
    """The method's top-activation table, or None when the run has none (a method without
    activations, or a run whose maps were built before it existed)."""
    path = Path(run_dir) / "methods" / method_name / TOP_FILE
    return read_parquet(path) if path.exists() else None


def feature_contexts(method, store, texts: pd.DataFrame, top: pd.DataFrame, k: int) -> list[dict]:
    """Feature k's top-activating contexts, most active first: for each, its text, the word
    rows' character spans (None where a word is not found in the text), the feature's
    activation on every word of the sentence, the index of the top word and its activation."""

    tokens = store.tokens
    text_of = texts.set_index("text_id")["text"]
    mine = top[top["concept"] == k].sort_values("rank")
    out = []
    for r in mine.itertuples():
        tid = int(tokens.at[int(r.row), "text_id"])
        same = sentence_words(tokens, tid)
        acts, idx = method.encode(store.read(same.index.to_numpy()))
        act = np.where(idx == k, acts, 0.0).sum(1)
        text = str(text_of[tid])
        out.append({"text_id": tid, "text": text, "words": same["word"].tolist(),
                    "spans": word_spans(text, same["word"].tolist()), "activations": act.astype(float).tolist(),
                    "peak": int(np.flatnonzero(same.index.to_numpy() == int(r.row))[0]),
                    "activation": float(r.activation)})
    return out


def activation_html(context: dict, scale: float) -> str:
    """The context's text with every word shaded by the feature's activation on it (relative to
    `scale`, the feature's largest activation), its value on hover and the top word in bold;
    everything escaped."""
    e, text, out, pos = html.escape, context["text"], [], 0
    for i, (span, a) in enumerate(zip(context["spans"], context["activations"])):
        if span is None:
            continue
        s, t = span
        out.append(e(text[pos:s]))
        word = f"<b>{e(text[s:t])}</b>" if i == context["peak"] else e(text[s:t])
        alpha = min(max(a / scale, 0.0), 1.0) if scale > 0 else 0.0
        if a > 0:
            out.append(f'<span title="activation {a:.3g}" style="background:rgba(255,140,0,{alpha:.2f});'
                       f'padding:1px 2px;border-radius:3px">{word}</span>')
        else:
            out.append(word)
        pos = t
    out.append(e(text[pos:]))
    return "".join(out)
