"""The evaluation's sentences shared among the ranks of a torchrun build, and each rank's rows
gathered on rank 0 through the run folder.

A sentence's rows depend on nothing but the sentence and its index (its random controls are drawn
from `faithfulness.text_rng(seed, ..., text_index)`), so rank r takes the sentences r, r + N,
r + 2N, ... of the list, each keeping its index in the whole list, and the rows of all ranks
together are the rows one process writes, up to the float rounding of other batch shapes.

The rows travel as parquet and JSON files in `eval/parts/` (no pickled objects), which rank 0
reads after a barrier and deletes: the run folder is on a file system every rank sees, as a build
on several nodes assumes (a build checks it before its first stage: `build._build`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from vqlc_core.base import distributed
from vqlc_core.base.runio import read_json, read_parquet, write_json, write_parquet
from vqlc_core.evaluate.faithfulness import ALL_TARGETS, CONTROL, CONTROLS

PARTS = "parts"


def share(items: list) -> list:
    """This rank's share of `items`: every world()-th item from its rank, the others None (which
    the faithfulness table and the instruments skip), so each item keeps its index."""
    r, n = distributed.rank(), distributed.world()
    return [x if i % n == r else None for i, x in enumerate(items)]


def gather(eval_dir: Path, name: str, frame: pd.DataFrame, facts: dict | None = None) -> list[tuple[pd.DataFrame, dict]]:
    """Every rank's (frame, facts) in rank order, on rank 0 (one process: its own); an empty list
    on the other ranks. Every rank must call it, with the same `name`."""
    if distributed.world() == 1:
        return [(frame, facts or {})]
    parts = Path(eval_dir) / PARTS
    r = distributed.rank()
    write_parquet(parts / f"{name}.{r}.parquet", plain(frame))
    write_json(parts / f"{name}.{r}.json", facts or {})
    distributed.barrier()  # every rank's part is written
    if not distributed.is_main():
        return []
    return [(read_parquet(parts / f"{name}.{i}.parquet"), read_json(parts / f"{name}.{i}.json"))
            for i in range(distributed.world())]


def clean(eval_dir: Path) -> None:
    """Delete the gathered parts (rank 0, once it has read them all)."""
    if distributed.is_main():
        shutil.rmtree(Path(eval_dir) / PARTS, ignore_errors=True)


def sorted_rows(df: pd.DataFrame, names: list[str], seeds: list[int]) -> pd.DataFrame:
    """Faithfulness rows in the table's order: by seed (in `seeds`' order), then the controls and
    each method's targets (as `faithfulness` sorts them), then sentence; so the rows of ranks
    that ran parts of the sentences sort to those of one process that ran them all."""
    order = [(CONTROL, t) for t in CONTROLS] + [(m, t) for m in names for t in ALL_TARGETS]
    df = df.assign(_r=[order.index(k) for k in zip(df["method"], df["target"])],
                   _s=[seeds.index(s) for s in df["seed"]])
    return df.sort_values(["_s", "_r", "text_index"], kind="stable").drop(columns=["_r", "_s"]).reset_index(drop=True)


def by_sentence(df: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    """Rows (e.g. the instruments') by seed (in `seeds`' order), then sentence, each sentence's
    rows in the order they were written: the same order whichever rank wrote them."""
    df = df.assign(_s=[seeds.index(s) for s in df["seed"]])
    return df.sort_values(["_s", "text_index"], kind="stable").drop(columns="_s").reset_index(drop=True)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame without its attrs (they go in the facts file)."""
    out = frame.copy(deep=False)
    out.attrs = {}
    return out
