"""Fine-tunes MiniLM on 48 real MR sentences, its dropout on (hidden and attention, p = 0.1), and
saves what rank 0 writes; run by test_finetune.py as one process and under torchrun with two.
Each rank keeps its rows of the whole batch's dropout masks (`dropout.batch_masks`), so the two
train one process's model. With --no-dropout the model's dropout is off; --parts N runs each batch
in N parts (`--finetune-parts`).
Usage: distributed_finetune.py OUT_DIR [--no-dropout] [--parts N]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from vqlc_core.base import distributed
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.datasets import load_dataset
from vqlc_core.data.finetune import finetune
from vqlc_core.data.models import resolve_model
from vqlc_core.data.settings import FinetuneConfig

CACHE = Path(__file__).resolve().parents[2] / "cache"
# 36 train texts in batches of 8: the last global batch has 4 rows, two for each rank;
# epochs 3 with patience 0, so the chosen epoch is a real choice among three.
CONFIG = dict(finetune="full", finetune_epochs=3, finetune_batch_size=8, finetune_dtype="float32",
              finetune_patience=0, finetune_lr=1e-4)


def main(out: Path, dropout: bool, parts: int) -> None:
    torch.set_num_threads(1)
    distributed.init()
    ds = load_dataset("mr", cache_dir=CACHE, limit=48, seed=0)
    split = np.array(["train"] * 36 + ["dev"] * 12)[np.random.default_rng(0).permutation(48)]  # MR lists one class first
    texts = pd.DataFrame({"text_id": np.arange(48), "text": ds.texts, "label": ds.labels, "split": split})
    bb = Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=64)
    assert bb.model.config.hidden_dropout_prob > 0 and bb.model.config.attention_probs_dropout_prob > 0
    for module in bb.model.modules():
        if isinstance(module, nn.Dropout) and not dropout:
            module.p = 0.0
    _, info = finetune(bb, texts, list(ds.class_names), FinetuneConfig(**CONFIG, finetune_parts=parts), out, seed=0, progress=False, estimate_time=False)
    if distributed.is_main():
        (out / "run.json").write_text(json.dumps({"history": info["history"], "chosen_epoch": info["chosen_epoch"],
                                                  "ranks": distributed.world()}))
    distributed.close()


if __name__ == "__main__":
    args = sys.argv[2:]
    main(Path(sys.argv[1]), "--no-dropout" not in args, int(args[args.index("--parts") + 1]) if "--parts" in args else 1)
