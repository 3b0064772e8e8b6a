"""Concept ablation: remove the span of one or several directions from every representation at
layer l by orthogonal projection, h' = h - (h Q^T) Q, and run the rest of the model.

`ablate` is the hook form (any forward inside the block is ablated); `from_layer` continues a
forward from layer-l states that are already known, skipping blocks 1..l, which is how the
explainer and the faithfulness evaluation re-run many ablations of the same text cheaply.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator
from weakref import WeakKeyDictionary

import numpy as np
import torch

from vqlc_core.data.backbone import Backbone, edit_layer

_RANK_TOL = 1e-6  # singular values below this fraction of the largest are dropped
_BLOCK_TUPLE: WeakKeyDictionary = WeakKeyDictionary()  # backbone -> whether its blocks return tuples


def orthonormal_basis(directions) -> torch.Tensor:
    """An orthonormal basis (r, d) of the span of `directions` ((d,) or (k, d), array or tensor),
    by SVD: near-zero and linearly dependent directions add nothing, so r <= k (r = 0 for an
    empty or all-zero set). A tensor's basis is on its device.

    numpy's LAPACK factors these few rows: torch's SVD of a (4, 384) matrix took 3.9 ms inside the
    evaluation (its threads waking after the model's forward passes) against numpy's 0.14 ms, and
    the faithfulness evaluation calls it some ten thousand times."""
    device = directions.device if torch.is_tensor(directions) else None
    v = (directions.detach().cpu().double().numpy() if device is not None
         else np.asarray(directions, dtype=np.float64))
    if v.size == 0:
        return torch.zeros(0, v.shape[-1] if v.ndim >= 2 else 0, device=device)
    v = v.reshape(-1, v.shape[-1])
    _, s, vh = np.linalg.svd(v, full_matrices=False)  # rows of vh span the row space of v
    keep = s > max(_RANK_TOL * float(s[0]), 1e-12)
    return torch.from_numpy(np.ascontiguousarray(vh[keep], dtype=np.float32)).to(device or "cpu")


def project_out(h: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """h minus its projection on the span of `basis`: h - (h Q^T) Q.

    basis (r, d) is shared by every row; basis (B, r, d) gives each example of h (B, ..., d)
    its own span (zero rows in a per-example basis remove nothing)."""
    if basis.numel() == 0:
        return h
    q = basis.to(h.device, h.dtype)
    if q.ndim == 2:
        return h - (h @ q.T) @ q
    flat = h.reshape(h.shape[0], -1, h.shape[-1])  # (B, T, d)
    coef = flat @ q.transpose(1, 2)  # (B, T, r)
    return (flat - coef @ q).reshape(h.shape)


class _Stop(Exception):
    """Ends the probing forward of `_block_returns_tuple` after the first block."""


def _block_returns_tuple(backbone: Backbone) -> bool:
    """Whether a block's output is a tuple (older models) or a tensor; found once per backbone
    with a two-token forward of the first block."""
    if backbone in _BLOCK_TUPLE:
        return _BLOCK_TUPLE[backbone]
    got = {}

    def hook(module, args, output):
        got["tuple"] = isinstance(output, tuple)
        raise _Stop

    handle = backbone.blocks[0].register_forward_hook(hook)
    enc, _ = backbone.tokenize(["a b"])
    try:
        with torch.inference_mode():
            backbone.base(**backbone.inputs(enc))
    except _Stop:
        pass
    finally:
        handle.remove()
    _BLOCK_TUPLE[backbone] = got["tuple"]
    return got["tuple"]


@contextmanager
def ablate(backbone: Backbone, layer: int, directions) -> Iterator[torch.Tensor]:
    """Project the span of `directions` out of every representation at `layer` for each forward
    inside the block. The hook is removed on leaving it, and an empty set of directions changes
    nothing.

    Args:
        backbone: the model (`Run.backbone`).
        layer: the block whose output is changed, 1..`backbone.n_layers`.
        directions: array of shape (n, d), e.g. `ConceptSet.directions(ids)`.

    Yields:
        The orthonormal basis of the span removed, (r, d).

    Raises:
        RunError: the model has no such layer.

    Examples:
        >>> dirs = run.concepts("vqlc").directions([193])
        >>> with vq.ablate(run.backbone, run.layer, dirs):
        ...     logits = run.classifier.logits(enc)
    """
    layer = backbone.check_layer(layer)
    basis = orthonormal_basis(directions)
    if len(basis) == 0:
        yield basis
        return
    with edit_layer(backbone, layer, lambda h: project_out(h, basis)):
        yield basis


@contextmanager
def from_layer(backbone: Backbone, layer: int, states: torch.Tensor) -> Iterator[None]:
    """Inside the block, a forward of the backbone continues from the given layer-l states
    (B, T, d) instead of computing them: blocks 1..l pass their input through untouched and
    block l returns `states`. The batch must have the shape `states` was taken from."""
    layer = backbone.check_layer(layer)
    blocks = [backbone.blocks[i] for i in range(layer)]
    returns_tuple = _block_returns_tuple(backbone)

    def shaped(h):
        return (h,) if returns_tuple else h

    def passthrough(*args, **kwargs):
        return shaped(args[0] if args else kwargs["hidden_states"])

    def give_states(*args, **kwargs):  # on the block's device and in its dtype (bf16 weights: bf16)
        h = args[0] if args else kwargs["hidden_states"]
        return shaped(states.to(h.device, h.dtype))

    saved = [vars(block).get("forward") for block in blocks]  # e.g. accelerate's wrapped forward
    try:
        for block in blocks[:-1]:
            block.forward = passthrough
        blocks[-1].forward = give_states
        yield
    finally:
        for block, old in zip(blocks, saved):
            if old is None:
                vars(block).pop("forward", None)  # the class's forward is back
            else:
                block.forward = old


@torch.inference_mode()
def ablated_proba(classifier, text_or_enc, layer: int, directions) -> np.ndarray:
    """Class probabilities (B, n_classes) of one text, a list of texts or a tokenized batch with
    the span of `directions` projected out at `layer`."""
    enc = text_or_enc
    if isinstance(text_or_enc, str):
        enc, _ = classifier.backbone.tokenize([text_or_enc])
    elif isinstance(text_or_enc, (list, tuple)):
        enc, _ = classifier.backbone.tokenize(list(text_or_enc))
    with ablate(classifier.backbone, layer, directions):
        return torch.softmax(classifier.logits(enc), -1).numpy()
