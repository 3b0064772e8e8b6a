"""Fits VQLC on a small clustered array and saves what rank 0 holds; run by test_distributed.py
both as one process and under torchrun. Usage: distributed_fit.py OUT_DIR"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch


from vqlc_core.base import distributed  # noqa: E402
from vqlc_core.data.store import ArrayStore  # noqa: E402
from vqlc_core.methods.vqlc import VQLC  # noqa: E402

# 1201 rows in batches of 100: the last global batch has one row, so rank 1's slice is empty.
# 24 codes for 6 clusters with a fast EMA: codes die and are replaced during the fit.
PARAMS = dict(n_concepts=24, epochs=4, batch_size=100, hidden=16, init_sample=400, lr=2e-3, decay=0.8,
              dead_threshold=0.5, progress=False)


def clustered(n=1201, d=10, k=6, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    return (centres[rng.integers(k, size=n)] + rng.normal(scale=0.3, size=(n, d))).astype(np.float32)


def main(out: Path) -> None:
    torch.set_num_threads(1)
    distributed.init()
    store = ArrayStore(clustered(), chunk_rows=300)
    model = VQLC(**PARAMS).fit(store)
    if distributed.is_main():
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "codes.npy", model.codebook_)
        np.save(out / "assignments.npy", model.predict(store.read_all()))
        np.save(out / "encoder.npy", model.model_.encoder.proj.weight.detach().numpy())
        (out / "history.json").write_text(json.dumps(model.history_))
    distributed.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
