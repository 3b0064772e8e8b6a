"""Dropout masks that do not depend on how a batch is cut across ranks.

Under torchrun each rank runs its rows of a global batch (`finetune.finetune`). With torch's own
dropout, a rank draws masks for its rows only, so the ranks together draw other masks than one
process does for the whole batch, and train another model. Inside `batch_masks(rows, total)`
every dropout (the model's `nn.Dropout` modules, LoRA's, and the attention probabilities' of
eager attention) draws the mask of the whole global batch, `total` rows, from torch's seeded
generator, and keeps the rows `rows` of it. Every rank draws the same numbers, so row i gets the
same mask whichever rank runs it, and the ranks train one process's model (up to float
summation order). Each rank pads its rows to the global batch's longest text, so the masks'
shapes agree too.

Attention dropout inside a fused kernel (SDPA) draws its own masks, so while the block runs a
model whose attention dropout is on uses eager attention (the same computation, unfused).
The cost: each rank draws the random numbers of the whole batch (cheap next to the matmuls).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout", "attn_pdrop")


def row_range(n: int, ranks: int, rank: int) -> tuple[int, int]:
    """The rows [lo, hi) of an n-row batch that `rank` of `ranks` runs: `np.array_split`'s parts
    (the first n % ranks parts one row longer)."""
    base, extra = divmod(n, ranks)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def attention_dropout(model: nn.Module) -> float:
    """The attention-probability dropout of a transformers model's config (0 when it has none)."""
    cfg = getattr(model, "config", None)
    return max((float(getattr(cfg, k, 0.0) or 0.0) for k in ATTENTION_DROPOUT_KEYS), default=0.0)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Inside the block, a model whose attention dropout is on uses eager attention (a fused
    kernel draws its own masks); a model already eager, without attention dropout, or unable to
    switch is left as it is. Fine-tuning enters it once for the whole run (`finetune.finetune`),
    so `batch_masks` finds the model eager and switches nothing at each step."""
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    switch = attention_dropout(model) > 0 and attn not in (None, "eager") and hasattr(model, "set_attn_implementation")
    if switch:
        try:
            model.set_attn_implementation("eager")
        except (ValueError, NotImplementedError):  # a model without eager attention trains as it is:
            switch = False  # its fused kernel's masks then depend on the rank, as torch's dropout's do
    try:
        yield
    finally:
        if switch:
            model.set_attn_implementation(attn)


@contextmanager
def batch_masks(model: nn.Module, rows: tuple[int, int], total: int) -> Iterator[None]:
    """Inside the block, every dropout of `model`'s forward keeps rows [lo, hi) of a mask drawn
    for all `total` rows (see the module's docstring), under `eager_attention`. Not thread-safe:
    `torch.nn.functional.dropout` is replaced for the block (training runs one forward at a
    time)."""
    lo, hi = rows
    torch_dropout = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return input
        if p >= 1.0:
            return input * 0.0
        shape = (total, *input.shape[1:])
        keep = torch.rand(shape, device=input.device)[lo:hi] >= p
        return input * keep.to(input.dtype) * (1.0 / (1.0 - p))

    with eager_attention(model):
        F.dropout = dropout
        try:
            yield
        finally:
            F.dropout = torch_dropout
