"""Extraction: stream texts through the backbone and write the activation store.

Texts are processed in fixed chunks (in text order); inside a chunk they are run in
length-sorted batches, and the chunk's rows are put back in text order before they are
appended. Row order is therefore: text 0's words, text 0's prediction row, text 1's words, ...
A chunk's output depends only on the chunk, so an interrupted extraction resumes at the chunk
holding the first row not yet in a finished shard and reproduces the same rows exactly.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from .backbone import AGGREGATIONS, Backbone, aggregate_words
from .runio import RunError, atomic_path, library_versions, read_json, write_json, write_parquet
from .store import STORE_FILE, TOKEN_COLUMNS, ActivationStore, ShardWriter, finalize_store


@dataclass
class ExtractConfig:
    layer: int
    aggregation: str = "last"  # which sub-word's state a word gets: last (default), first, mean
    pooling: str | None = None  # prediction representation; None = the model's default
    batch_size: int = 32
    chunk_texts: int = 512  # the unit of work and of resumption
    shard_rows: int = 65536  # rows per float16 shard
    dtype: str = "float32"  # or "bfloat16" (autocast on CPU)

    def __post_init__(self):
        if self.aggregation not in AGGREGATIONS:
            raise RunError(f"Unknown aggregation '{self.aggregation}'; choose one of {', '.join(AGGREGATIONS)}.")
        if self.dtype not in ("float32", "bfloat16"):
            raise RunError(f"Unknown dtype '{self.dtype}'; choose float32 or bfloat16.")
        for name in ("batch_size", "chunk_texts", "shard_rows"):
            if getattr(self, name) < 1:
                raise RunError(f"{name} must be at least 1, got {getattr(self, name)}.")

    @property
    def autocast_dtype(self):
        return torch.bfloat16 if self.dtype == "bfloat16" else None


def extract_texts(backbone: Backbone, texts: list[str], cfg: ExtractConfig):
    """Rows for a list of texts, in text order: (vectors (R, d) float32, token records).

    Each text gives one row per word, then its prediction row (word_index -1)."""
    lengths = [len(backbone.tokenizer(t, truncation=True, max_length=backbone.max_length)["input_ids"]) for t in texts]
    order = np.argsort(-np.asarray(lengths), kind="stable")
    per_text: dict[int, tuple[np.ndarray, list]] = {}
    for b in range(0, len(texts), cfg.batch_size):
        idx = order[b : b + cfg.batch_size]
        enc, words = backbone.tokenize([texts[i] for i in idx])
        h = backbone.states_at(enc, cfg.layer, cfg.autocast_dtype)  # (B, T, d)
        pooled = backbone.pool(h, enc["attention_mask"], cfg.pooling)  # (B, d)
        for j, i in enumerate(idx):
            wv = aggregate_words(h[j], words[j], cfg.aggregation)
            vec = torch.cat([wv, pooled[j : j + 1]]).numpy()
            recs = [(wi, w.word, "word") for wi, w in enumerate(words[j])] + [(-1, "[PRED]", "pred")]
            per_text[int(i)] = (vec, recs)
    vecs = [per_text[i][0] for i in range(len(texts))]
    recs = [(i, *r) for i in range(len(texts)) for r in per_text[i][1]]
    return np.concatenate(vecs).astype(np.float32), recs


def _config_hash(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def build_store(backbone: Backbone, texts: pd.DataFrame, cfg: ExtractConfig, out: str | Path,
                progress: bool = True, stop_after_chunks: int | None = None) -> ActivationStore:
    """Write the activation store for `texts` (columns text_id, text, label, split) into `out`.

    Resumes an interrupted extraction of the same configuration; `stop_after_chunks` stops early
    (as a kill would), for tests of resumption."""
    out = Path(out)
    backbone.check_layer(cfg.layer)
    if (out / STORE_FILE).exists():
        return ActivationStore(out)
    job = {"config": asdict(cfg), "model": backbone.name, "max_length": backbone.max_length,
           "n_texts": len(texts), "texts": _config_hash({"t": texts["text"].tolist()})}
    key = _config_hash(job)
    progress_path = out / "progress.json"
    state = read_json(progress_path) if progress_path.exists() else None
    if state is None or state.get("key") != key:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        state = {"key": key, "n_shards": 0, "resume_chunk": 0, "skip": 0}
        write_json(progress_path, state)
    (out / "tokens").mkdir(exist_ok=True)
    writer = ShardWriter(out, backbone.hidden_size, cfg.shard_rows, n_written_shards=state["n_shards"])
    chunks = [(s, min(s + cfg.chunk_texts, len(texts))) for s in range(0, len(texts), cfg.chunk_texts)]
    bar = tqdm(total=len(texts), initial=chunks[state["resume_chunk"]][0] if chunks and state["resume_chunk"] < len(chunks) else len(texts),
               desc=f"extract layer {cfg.layer}", unit="text", disable=not progress)
    global_row = state["n_shards"] * cfg.shard_rows
    done_chunks = 0
    for c in range(state["resume_chunk"], len(chunks)):
        s, e = chunks[c]
        part = texts.iloc[s:e]
        vecs, recs = extract_texts(backbone, part["text"].tolist(), cfg)
        tok = pd.DataFrame(recs, columns=["local_id", "word_index", "word", "kind"])
        tok["text_id"] = part["text_id"].to_numpy()[tok["local_id"].to_numpy()]
        tok["split"] = part["split"].to_numpy()[tok["local_id"].to_numpy()]
        tok["label"] = part["label"].to_numpy()[tok["local_id"].to_numpy()].astype(np.int64)
        write_parquet(out / "tokens" / f"part_{c:05d}.parquet", tok[TOKEN_COLUMNS])
        skip = state["skip"] if c == state["resume_chunk"] else 0
        chunk_start = global_row - skip
        vecs = vecs[skip:]
        for shard in writer.append(vecs):
            boundary = (shard + 1) * cfg.shard_rows
            if boundary < chunk_start + skip + len(vecs):
                state = {"key": key, "n_shards": shard + 1, "resume_chunk": c, "skip": boundary - chunk_start}
            else:
                state = {"key": key, "n_shards": shard + 1, "resume_chunk": c + 1, "skip": 0}
            write_json(progress_path, state)
        global_row += len(vecs)
        bar.update(e - s)
        done_chunks += 1
        if stop_after_chunks is not None and done_chunks >= stop_after_chunks and c + 1 < len(chunks):
            bar.close()
            return None
    writer.close()
    bar.close()
    n_rows = _merge_tokens(out, len(chunks))
    if n_rows != global_row:
        raise RunError(f"Extraction wrote {global_row} vectors but {n_rows} token rows; rebuild the 'extract' stage.")
    meta = {"n_rows": n_rows, "dim": backbone.hidden_size, "shard_rows": cfg.shard_rows,
            "shards": [ShardWriter.shard_name(i) for i in range(writer.n_shards)], "dtype": "float16",
            "model": backbone.name, "kind": backbone.kind, "layer": cfg.layer, "n_layers": backbone.n_layers,
            "pooling": cfg.pooling or backbone.pooling, "aggregation": cfg.aggregation, "max_length": backbone.max_length,
            "n_texts": len(texts), "config": asdict(cfg), "versions": library_versions(),
            "row_order": "text order; per text its words in order, then its prediction row (word_index -1)"}
    finalize_store(out, meta)
    shutil.rmtree(out / "tokens", ignore_errors=True)
    progress_path.unlink(missing_ok=True)
    return ActivationStore(out)


def _merge_tokens(out: Path, n_chunks: int) -> int:
    """Concatenate the per-chunk token parts into tokens.parquet, streaming one part at a time."""
    n = 0
    with atomic_path(out / "tokens.parquet") as tmp:
        writer = None
        for c in range(n_chunks):
            table = pq.read_table(out / "tokens" / f"part_{c:05d}.parquet")
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table)
            n += table.num_rows
        if writer is None:
            pq.write_table(pa.table({c: [] for c in TOKEN_COLUMNS}), tmp)
        else:
            writer.close()
    return n
