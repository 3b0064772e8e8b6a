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
from vqlc_core.base.hardware import free_bytes
from vqlc_core.data.models import check_fits, choose_weights, load_model, prepare
from vqlc_core.base.runio import RunError
from vqlc_core.data.settings import POOLINGS




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
    """A frozen Hugging Face model with word-aligned tokenization and layer-l access: the token
    states of a layer, pooled per word and per text, with the model's own hooks. `Run.backbone`
    gives the run's; `from_source` loads one from a resolved model.

    Args:
        tokenizer: the model's fast tokenizer (word alignment reads its offsets and word ids).
        model: the Hugging Face model.
        kind: 'encoder' or 'decoder'.
        pooling: how a text's prediction representation is pooled: 'mean', 'cls' or 'last'.
        max_length: tokens per text at most.
        name: the model's name, for messages.
        is_classifier: the model is a sequence classifier whose head is used as it is.

    Raises:
        RunError: the tokenizer is not a fast one, or the pooling is unknown.

    Attributes:
        add_bos (bool): the tokenizer puts a BOS token first (it is left out of every pooling).
        aligner (Aligner): maps tokens to the words of the text.
        lock (RLock): one forward pass at a time (hooks act on the shared model).
        blocks (list of Module): the model's transformer blocks, in order.
        base (Module): the model without its LM or classification head.
    """

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
    def from_source(cls, source, dtype=torch.float32, max_length: int = 256, pooling: str | None = None,
                    device_map=None):
        """The backbone of a resolved `ModelSource`, loaded (in `dtype`, onto `device_map`; see
        `models.load_model`) and prepared."""
        tok, model = load_model(source, dtype=dtype, device_map=device_map)
        return cls(tok, model, source.kind, pooling or source.pooling, max_length, source.name, source.is_classifier)

    @classmethod
    def on_device(cls, source, extract, device: str, full_finetune: bool) -> tuple["Backbone", dict]:
        """The backbone a build loads on `device` with `ExtractConfig` `extract`: its weights in
        the dtype `models.choose_weights` picks, placed as `models.check_fits` allows (refused in
        one sentence before a byte is read when they cannot fit); and how they were loaded."""
        dtype = choose_weights(extract.weights, source, extract.dtype, device, full_finetune, free_bytes("cpu"))
        device_map = check_fits(source, dtype, device, free_bytes(device) if device != "cpu" else None,
                                free_bytes("cpu"))
        bb = cls.from_source(source, dtype=getattr(torch, dtype), max_length=extract.max_length,
                             pooling=extract.pooling, device_map=device_map)
        return bb, {"dtype": dtype, "device": str(bb.device),
                    "device_map": device_map if isinstance(device_map, str) else None}

    @staticmethod
    def _base_model(model):
        """The model without its LM or classification head (its forward returns hidden states)."""
        base = getattr(model, "base_model", model)
        return base if base is not None else model

    @property
    def device(self) -> torch.device:
        """Where the model's inputs go: its embeddings' device (the first of several under a
        device map). vqlc's own tensors stay on the CPU: what enters the model is moved here and
        what the backbone returns (states, logits) comes back to the CPU."""
        return next(self.model.parameters()).device

    def inputs(self, enc) -> dict:
        """The model's keyword inputs from a (CPU) batch, on the model's device."""
        dev = self.device
        return {"input_ids": enc["input_ids"].to(dev), "attention_mask": enc["attention_mask"].to(dev)}

    @property
    def n_layers(self) -> int:
        """The model's number of transformer blocks."""
        return self.model.config.num_hidden_layers

    @property
    def hidden_size(self) -> int:
        """d, the width of the model's hidden states."""
        return self.model.config.hidden_size

    def check_layer(self, layer: int) -> int:
        """`layer` as an int when the model has it (1..`n_layers`).

        Raises:
            RunError: the model has no such layer.
        """
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
                self.base(**self.inputs(enc))
            except _StopForward:
                pass
        return got["h"].float()

    def final_states(self, enc, autocast_dtype=None) -> torch.Tensor:
        """Last-layer hidden states (B, T, d) as the model's head reads them (final norm applied)."""
        with autocast(autocast_dtype):
            out = self.base(**self.inputs(enc))
        return out.last_hidden_state.float().cpu()

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
    """Autocast to `dtype` (e.g. torch.bfloat16) inside the block, on the CPU and, where there is
    one, on CUDA; nothing when it is None."""
    if dtype is None:
        yield
    elif torch.cuda.is_available():
        with torch.autocast("cpu", dtype=dtype), torch.autocast("cuda", dtype=dtype):
            yield
    else:
        with torch.autocast("cpu", dtype=dtype):
            yield


@contextmanager
def capture(backbone: Backbone, layer: int, stop: bool = False) -> Iterator[dict]:
    """Record a layer's output while the model runs; the hook is removed on leaving the block.

    Args:
        backbone: the model (`Run.backbone`).
        layer: the block whose output is recorded, 1..`backbone.n_layers`.
        stop: end the forward pass at that block (nothing after it is computed).

    Yields:
        A dict that holds, after a forward pass, the block's output under "h" (on the CPU).

    Examples:
        >>> with vq.capture(run.backbone, run.layer, stop=True) as got:
        ...     run.backbone.model(**inputs)
        >>> got["h"].shape  # (batch, tokens, d)
    """
    got: dict = {}

    def hook(module, args, output):
        got["h"] = _hidden(output).cpu()
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
