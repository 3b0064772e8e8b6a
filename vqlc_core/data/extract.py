"""Extraction: stream texts through the backbone and write the activation store.

Texts are processed in fixed chunks (in text order); inside a chunk they are run in
length-sorted batches, and the chunk's rows are put back in text order before they are
appended. Row order is therefore: text 0's words, text 0's prediction row, text 1's words, ...
The same forward also gives each text's pooled last-layer representation, the classifier's
features (`final.npy`, one row per text in text order). A chunk's output depends only on the chunk, so an interrupted extraction resumes at the chunk
holding the first row not yet in a finished shard and reproduces the same rows exactly.

Under torchrun the chunks are shared out by rank (rank r takes chunks r, r+N, ...); each chunk
is written to its own part, and rank 0 joins the parts in chunk order, so the row order, and
every row, is the same as one process gives.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from vqlc_core.base import distributed
from vqlc_core.base.hardware import smaller_batch
from vqlc_core.base.runio import (RunError, atomic_path, library_versions, read_json, read_npy, write_json, write_npy,
                                  write_parquet)
from vqlc_core.data.backbone import Backbone, aggregate_words, capture
from vqlc_core.data.settings import ExtractConfig
from vqlc_core.data.store import FINAL_FILE, STORE_FILE, TOKEN_COLUMNS, ActivationStore, ShardWriter, finalize_store


@torch.inference_mode()
def _forward(backbone: Backbone, enc, layer: int, autocast_dtype, final: bool):
    """Layer-l states (B, T, d) and, when `final`, the last layer's states from the same pass
    (the classifier's features: no second pass over the texts); without it, stop at layer l."""
    if not final:
        return backbone.states_at(enc, layer, autocast_dtype), None
    with capture(backbone, layer) as got:
        last = backbone.final_states(enc, autocast_dtype)
    return got["h"].float(), last


def extract_texts(backbone: Backbone, texts: list[str], cfg: ExtractConfig, final: bool = False):
    """Rows for a list of texts, in text order: (vectors (R, d) float32, token records), and with
    `final` also the pooled last-layer representation of each text (n, d), from the same forward.

    Each text gives one row per word, then its prediction row (word_index -1)."""
    lengths = [len(backbone.tokenizer(t, truncation=True, max_length=backbone.max_length)["input_ids"]) for t in texts]
    order = np.argsort(-np.asarray(lengths), kind="stable")
    per_text: dict[int, tuple[np.ndarray, list]] = {}
    finals = np.zeros((len(texts), backbone.hidden_size), dtype=np.float32)
    b, size = 0, cfg.batch_size
    while b < len(texts):
        idx = order[b : b + size]
        enc, words = backbone.tokenize([texts[i] for i in idx])
        try:
            h, last = _forward(backbone, enc, cfg.layer, cfg.autocast_dtype, final)  # (B, T, d) each
        except Exception as err:  # out of memory: the same texts again in half the batch
            size = smaller_batch(err, size, "--batch-size")
            continue
        b += len(idx)
        # the per-text, per-word work below on the CPU: on a GPU, one copy per batch instead of
        # a small kernel and a synchronising copy per text (bench/gpu_check.py: 3.1k -> tokens/s)
        h = h.cpu()
        pooled = backbone.pool(h, enc["attention_mask"].cpu(), cfg.pooling)  # (B, d)
        if last is not None:
            finals[idx] = backbone.pool(last, enc["attention_mask"]).cpu().numpy()  # the head's pooling
        for j, i in enumerate(idx):
            wv = aggregate_words(h[j], words[j], cfg.aggregation)
            vec = torch.cat([wv, pooled[j : j + 1]]).cpu().numpy()
            recs = [(wi, w.word, "word") for wi, w in enumerate(words[j])] + [(-1, "[PRED]", "pred")]
            per_text[int(i)] = (vec, recs)
    vecs = [per_text[i][0] for i in range(len(texts))]
    recs = [(i, *r) for i in range(len(texts)) for r in per_text[i][1]]
    out = np.concatenate(vecs).astype(np.float32), recs
    return (*out, finals) if final else out


def _config_hash(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _part_path(out: Path, c: int) -> Path:
    return out / "parts" / f"vectors_{c:05d}.npy"


def _final_path(out: Path, c: int) -> Path:
    return out / "parts" / f"final_{c:05d}.npy"


class _Assembler:
    """Rank 0's half of extraction: appends finished chunk parts, in chunk order, to the
    fixed-size shards. After each finished shard it records in progress.json the first row not
    yet in a shard (chunk `next_chunk`, row `skip` of it); a chunk's vector part is deleted once
    all of its rows are in shards, so the parts on disk stay few while one process extracts."""

    def __init__(self, out: Path, dim: int, shard_rows: int, state: dict, n_chunks: int):
        self.out, self.shard_rows, self.n_chunks = out, shard_rows, n_chunks
        self.state = dict(state)
        self.writer = ShardWriter(out, dim, shard_rows, n_written_shards=state["n_shards"])
        self.pending = state["next_chunk"]  # the next chunk to append
        self.rows = state["n_shards"] * shard_rows  # rows appended so far, shards and buffer
        self._skip = state["skip"]  # rows of the first appended chunk already in shards
        self._kept = state["next_chunk"]

    def pull(self) -> None:
        """Append every ready part from the next chunk on; stop at the first not yet written."""
        while self.pending < self.n_chunks and _part_path(self.out, self.pending).exists():
            c = self.pending
            vecs = read_npy(_part_path(self.out, c))[self._skip :]  # (rows, d) float16, one chunk
            chunk_start = self.rows - self._skip
            for shard in self.writer.append(vecs):
                boundary = (shard + 1) * self.shard_rows
                inside = boundary < self.rows + len(vecs)
                self.state.update(n_shards=shard + 1, next_chunk=c if inside else c + 1,
                                  skip=boundary - chunk_start if inside else 0)
                write_json(self.out / "progress.json", self.state)
                for done in range(self._kept, self.state["next_chunk"]):
                    _part_path(self.out, done).unlink(missing_ok=True)
                self._kept = self.state["next_chunk"]  # the first chunk whose part is still needed
            self.rows += len(vecs)
            self._skip = 0
            self.pending += 1

    def close(self) -> int:
        """Write the last, short shard; return the number of shards."""
        if self.pending != self.n_chunks:
            raise RunError(f"Extraction chunk {self.pending} has no part on disk after every rank finished; "
                           "run the same command again to redo it.")
        self.writer.close()
        return self.writer.n_shards


def build_store(backbone: Backbone, texts: pd.DataFrame, cfg: ExtractConfig, out: str | Path,
                progress: bool = True, stop_after_chunks: int | None = None) -> ActivationStore:
    """Write the activation store for `texts` (columns text_id, text, label, split) into `out`.

    Every chunk of texts goes to a part (float16 vectors and a token table); rank 0 appends the
    parts in chunk order to the shards. Under torchrun rank r extracts chunks r, r+N, r+2N, ...,
    rank 0 assembles the store once every rank has finished, and the store equals, row for row,
    the one a single process writes. Resumes an interrupted extraction of the same configuration;
    `stop_after_chunks` stops early (as a kill would), for tests of resumption."""
    out = Path(out)
    if cfg.layer is None:  # the second-to-last layer, as a build resolves it
        cfg = replace(cfg, layer=max(1, backbone.n_layers - 1))
    backbone.check_layer(cfg.layer)
    if (out / STORE_FILE).exists():
        return ActivationStore(out)
    job = {"config": asdict(cfg), "model": backbone.name, "max_length": backbone.max_length,
           "n_texts": len(texts), "texts": _config_hash({"t": texts["text"].tolist()})}
    key = _config_hash(job)
    progress_path = out / "progress.json"
    if distributed.is_main():
        state = read_json(progress_path) if progress_path.exists() else None
        if state is None or state.get("key") != key:
            if out.exists():
                shutil.rmtree(out)
            (out / "parts").mkdir(parents=True)
            write_json(progress_path, {"key": key, "n_shards": 0, "next_chunk": 0, "skip": 0})
        (out / "tokens").mkdir(exist_ok=True)
        (out / "parts").mkdir(exist_ok=True)
    distributed.barrier()
    state = read_json(progress_path)
    distributed.barrier()  # every rank has read the state before rank 0 moves it on
    chunks = [(s, min(s + cfg.chunk_texts, len(texts))) for s in range(0, len(texts), cfg.chunk_texts)]
    mine = [c for c in range(state["next_chunk"], len(chunks))
            if c % distributed.world() == distributed.rank() and not _part_path(out, c).exists()]
    assembler = _Assembler(out, backbone.hidden_size, cfg.shard_rows, state, len(chunks)) if distributed.is_main() else None
    bar = tqdm(total=sum(chunks[c][1] - chunks[c][0] for c in mine), desc=f"extract layer {cfg.layer}", unit="text",
               disable=not (progress and distributed.is_main()))
    for done, c in enumerate(mine, 1):
        s, e = chunks[c]
        part = texts.iloc[s:e]
        vecs, recs, finals = extract_texts(backbone, part["text"].tolist(), cfg, final=True)
        tok = pd.DataFrame(recs, columns=["local_id", "word_index", "word", "kind"])
        tok["text_id"] = part["text_id"].to_numpy()[tok["local_id"].to_numpy()]
        tok["split"] = part["split"].to_numpy()[tok["local_id"].to_numpy()]
        tok["label"] = part["label"].to_numpy()[tok["local_id"].to_numpy()].astype(np.int64)
        write_parquet(out / "tokens" / f"part_{c:05d}.parquet", tok[TOKEN_COLUMNS])
        write_npy(_final_path(out, c), finals)
        write_npy(_part_path(out, c), vecs.astype(np.float16))  # written last: marks the chunk done
        bar.update(e - s)
        if assembler is not None:
            assembler.pull()
        if stop_after_chunks is not None and done >= stop_after_chunks and c != mine[-1]:
            bar.close()
            return None
    bar.close()
    distributed.barrier()  # every part is on disk
    if assembler is not None:
        assembler.pull()
        n_shards = assembler.close()
        n_rows = _merge_tokens(out, len(chunks))
        if n_rows != assembler.rows:
            raise RunError(f"Extraction wrote {assembler.rows} vectors but {n_rows} token rows; rebuild the 'extract' stage.")
        meta = {"n_rows": n_rows, "dim": backbone.hidden_size, "shard_rows": cfg.shard_rows,
                "shards": [ShardWriter.shard_name(i) for i in range(n_shards)], "dtype": "float16",
                "model": backbone.name, "kind": backbone.kind, "layer": cfg.layer, "n_layers": backbone.n_layers,
                "pooling": cfg.pooling or backbone.pooling, "aggregation": cfg.aggregation, "max_length": backbone.max_length,
                "n_texts": len(texts), "config": asdict(cfg), "versions": library_versions(),
                "row_order": "text order; per text its words in order, then its prediction row (word_index -1)"}
        write_npy(out / FINAL_FILE, np.concatenate([read_npy(_final_path(out, c)) for c in range(len(chunks))]
                                                   or [np.zeros((0, backbone.hidden_size), np.float32)]))
        finalize_store(out, meta)
        shutil.rmtree(out / "tokens", ignore_errors=True)
        shutil.rmtree(out / "parts", ignore_errors=True)
        progress_path.unlink(missing_ok=True)
    distributed.barrier()  # store.json is written
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
