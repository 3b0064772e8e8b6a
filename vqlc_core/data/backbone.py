"""The frozen backbone: tokenization with word alignment, a forward pass that stops at layer l,
the pooled prediction representation, and the hook context managers the explainer uses.

Layers are counted like `output_hidden_states`: layer 0 is the embedding output and layer l
(1..n) is the output of transformer block l. Every model, encoder or decoder, goes through the
same code: the blocks are found as the model's ModuleList of `num_hidden_layers` modules.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch
from torch import nn

from vqlc_core.data.alignment import Aligner, WordSpan, tokenize_words
from vqlc_core.data.models import load_model, prepare
from vqlc_core.base.runio import RunError

POOLINGS = ("cls", "mean", "last")  # the prediction representation: first token, mean over the text, last token
AGGREGATIONS = ("last", "first", "mean")  # which sub-word's state a word gets
DTYPES = ("float32", "bfloat16")  # the precision of a forward: float32, or bfloat16 CPU autocast


class _StopForward(Exception):
    """Raised by the capture hook to end a forward pass early, above layer l."""


def find_blocks(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of any Hugging Face model: its ModuleList of num_hidden_layers."""
    n = model.config.num_hidden_layers
    best = None
    for _, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n:
            best = mod
            break
    if best is None:
        raise RunError(f"Could not find the {n} transformer blocks of {type(model).__name__}.")
    return best


def _hidden(output):
    return output[0] if isinstance(output, tuple) else output


def _replace_hidden(output, hidden):
    return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden


class Backbone:
    """A frozen Hugging Face model with word-aligned tokenization and layer-l access."""

    def __init__(self, tokenizer, model: nn.Module, kind: str, pooling: str, max_length: int = 256,
                 name: str = "", is_classifier: bool = False):
        if not getattr(tokenizer, "is_fast", False):
            raise RunError("vqlc needs a fast tokenizer (word alignment reads its offsets and word ids).")
        if pooling not in POOLINGS:
            raise RunError(f"Unknown pooling '{pooling}'; choose one of {', '.join(POOLINGS)}.")
        self.tokenizer, self.model, self.kind, self.pooling = tokenizer, model, kind, pooling
        self.max_length, self.name, self.is_classifier = max_length, name, is_classifier
        self.add_bos = prepare(tokenizer, model, kind)  # frozen, eval mode, padded on the right
        self.aligner = Aligner(tokenizer)  # word ids, or word-start markers where they name no words
        self.lock = threading.RLock()  # hooks act on the shared model: one pass at a time
        self.blocks = find_blocks(model)
        self.base = self._base_model(model)

    @classmethod
    def from_source(cls, source, dtype=torch.float32, max_length: int = 256, pooling: str | None = None):
        """The backbone of a resolved `ModelSource`, loaded and prepared."""
        tok, model = load_model(source, dtype=dtype)
        return cls(tok, model, source.kind, pooling or source.pooling, max_length, source.name, source.is_classifier)

    @staticmethod
    def _base_model(model):
        """The model without its LM or classification head (its forward returns hidden states)."""
        base = getattr(model, "base_model", model)
        return base if base is not None else model

    @property
    def n_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size

    def check_layer(self, layer: int) -> int:
        if not isinstance(layer, (int, np.integer)) or not 1 <= layer <= self.n_layers:
            raise RunError(f"Layer {layer} is outside the model: {self.name or 'it'} has layers 1..{self.n_layers}.")
        return int(layer)

    # --- tokenization -------------------------------------------------------------------
    def tokenize(self, texts: list[str]):
        """A padded batch and, per text, its words with their token positions."""
        return tokenize_words(self.tokenizer, self.aligner, texts, self.max_length, self.add_bos)

    # --- forward passes -----------------------------------------------------------------
    @torch.inference_mode()
    def states_at(self, enc, layer: int, autocast_dtype=None) -> torch.Tensor:
        """Hidden states (B, T, d) at `layer`; blocks above it are never run."""
        layer = self.check_layer(layer)
        with capture(self, layer, stop=True) as got, autocast(autocast_dtype):
            try:
                self.base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
            except _StopForward:
                pass
        return got["h"].float()

    def final_states(self, enc, autocast_dtype=None) -> torch.Tensor:
        """Last-layer hidden states (B, T, d) as the model's head reads them (final norm applied)."""
        with autocast(autocast_dtype):
            out = self.base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        return out.last_hidden_state.float()

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str | None = None) -> torch.Tensor:
        """The prediction representation (B, d): CLS (first token), mean over the text, or last token."""
        pooling = pooling or self.pooling
        if pooling == "cls":
            return hidden[:, 0]
        m = attention_mask.to(hidden.dtype)
        if pooling == "mean":
            if self.add_bos:  # the BOS attention sink is not part of the text
                m = m.clone()
                m[:, 0] = 0
            return (hidden * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1)
        last = attention_mask.long().sum(1) - 1  # right padding: the last real token
        return hidden[torch.arange(hidden.shape[0]), last]


def aggregate_words(hidden: torch.Tensor, words: list[WordSpan], how: str = "last") -> torch.Tensor:
    """One vector per word (W, d) from one text's states (T, d): last, first or mean sub-word."""
    if not words:
        return hidden.new_zeros((0, hidden.shape[-1]))
    if how in ("last", "first"):
        pick = -1 if how == "last" else 0
        return hidden.index_select(0, torch.tensor([w.tokens[pick] for w in words]))
    return torch.stack([hidden[w.tokens].mean(0) for w in words])


@contextmanager
def autocast(dtype):
    """CPU autocast to `dtype` (e.g. torch.bfloat16) inside the block; nothing when it is None."""
    if dtype is None:
        yield
    else:
        with torch.autocast("cpu", dtype=dtype):
            yield


@contextmanager
def capture(backbone: Backbone, layer: int, stop: bool = False) -> Iterator[dict]:
    """Record the output of block `layer` in the yielded dict under "h"; with stop=True, end
    the forward pass there. The hook is removed in `finally`."""
    got: dict = {}

    def hook(module, args, output):
        got["h"] = _hidden(output)
        if stop:
            raise _StopForward

    handle = backbone.blocks[layer - 1].register_forward_hook(hook)
    try:
        yield got
    finally:
        handle.remove()


@contextmanager
def edit_layer(backbone: Backbone, layer: int, fn) -> Iterator[None]:
    """Replace block `layer`'s hidden output h by fn(h) for every forward inside the block."""

    def hook(module, args, output):
        return _replace_hidden(output, fn(_hidden(output)))

    handle = backbone.blocks[layer - 1].register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
