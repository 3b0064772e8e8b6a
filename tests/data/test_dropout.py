"""Dropout masks that do not depend on how a batch is cut (vqlc_core/data/dropout.py): a batch's
rows run in parts under `batch_masks` get the outputs the whole batch gets, on the real MiniLM
in training mode (hidden and attention dropout on)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from vqlc_core.data.dropout import attention_dropout, batch_masks, row_range

TORCH_DROPOUT = torch.nn.functional.dropout
SENTENCES = ["a gripping, funny film", "dull and far too long to sit through without a break", "wonderful",
             "the plot goes nowhere", "one of the year's best"]


@pytest.mark.parametrize("n, ranks", [(8, 2), (7, 2), (5, 3), (1, 2), (4, 4)])
def test_row_ranges_are_array_splits_parts(n, ranks):
    sizes = [len(part) for part in np.array_split(np.arange(n), ranks)]
    starts = np.cumsum([0] + sizes[:-1])
    assert [row_range(n, ranks, r) for r in range(ranks)] == [(int(s), int(s) + z) for s, z in zip(starts, sizes)]


def _parts(forward, n: int, ranks: int, seed: int = 3) -> torch.Tensor:
    out = []
    for r in range(ranks):
        lo, hi = row_range(n, ranks, r)
        torch.manual_seed(seed)  # every rank's generator at the step's seed
        with batch_masks(forward.model, (lo, hi), n):
            out.append(forward(lo, hi))
    return torch.cat(out)


def test_a_dropout_module_keeps_the_whole_batchs_masks_row_by_row():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

    net = Net().train()
    x = torch.ones(6, 4, 5)

    def forward(lo, hi):
        return net.drop(x[lo:hi])

    forward.model = net
    torch.manual_seed(3)
    with batch_masks(net, (0, 6), 6):
        whole = net.drop(x)
    assert 0 < int((whole == 0).sum()) < whole.numel()  # some dropped, some kept (scaled by 2)
    assert torch.equal(_parts(forward, 6, 2), whole)
    assert torch.equal(_parts(forward, 6, 4), whole)
    torch.manual_seed(3)
    plain = torch.cat([net.drop(x[:3]), net.drop(x[3:])])  # torch's own masks: other ones
    assert not torch.equal(plain, whole)
    assert torch.nn.functional.dropout is TORCH_DROPOUT  # torch's own again after the block


def test_minilm_in_training_mode_gives_each_row_the_same_output_in_any_part(tmp_path):
    from tests.conftest import CACHE
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.models import resolve_model

    bb = Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=32)
    assert attention_dropout(bb.model) > 0
    attn = bb.model.config._attn_implementation
    enc, _ = bb.tokenize(SENTENCES)
    enc = {k: enc[k] for k in ("input_ids", "attention_mask")}
    bb.model.train()

    def forward(lo, hi):
        with torch.no_grad():
            return bb.final_states({k: v[lo:hi] for k, v in enc.items()})

    forward.model = bb.model
    try:
        torch.manual_seed(3)
        with batch_masks(bb.model, (0, 5), 5):
            whole = forward(0, 5)
        two, three = _parts(forward, 5, 2), _parts(forward, 5, 3)
        torch.manual_seed(3)
        other = torch.cat([forward(0, 2), forward(2, 5)])  # torch's own dropout, in parts
    finally:
        bb.model.eval()
    assert bb.model.config._attn_implementation == attn  # the attention is back as it was
    real = enc["attention_mask"].bool()
    for parts in (two, three):
        assert float((parts - whole)[real].abs().max()) < 1e-4
    assert float((other - whole)[real].abs().max()) > 1e-2  # the masks matter: other masks, other states


def test_a_model_without_eager_attention_still_trains_under_the_batch_masks():
    class NoEager(nn.Module):
        config = type("Config", (), {"attention_probs_dropout_prob": 0.1, "_attn_implementation": "sdpa"})()

        def set_attn_implementation(self, name):
            raise ValueError(f"{name} is not supported")

    model = NoEager().train()
    x = torch.ones(4, 3)
    torch.manual_seed(1)
    with batch_masks(model, (0, 4), 4):
        out = nn.functional.dropout(x, 0.5, True)
    assert out.shape == x.shape and set(out.unique().tolist()) <= {0.0, 2.0}
    assert torch.nn.functional.dropout is TORCH_DROPOUT and model.config._attn_implementation == "sdpa"
