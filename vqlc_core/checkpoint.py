"""Training checkpoints: a model's state_dict, its optimizer's state, the epoch reached, the
history so far and the settings of the fit, in one safetensors file whose header holds the JSON
metadata, so one atomic rename writes both and they can never disagree. Never pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .runio import RunError, read_safetensors, write_safetensors

CHECKPOINT_FILE = "checkpoint.safetensors"
FORMAT_VERSION = 1
_META_KEY = "checkpoint"


@dataclass
class Checkpoint:
    """What a checkpoint holds besides the tensors loaded into the model and optimizer."""

    epoch: int  # epochs completed
    history: list[dict]  # one entry per completed epoch
    params: dict  # the settings the fit was started with


def _optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's per-parameter state as flat named tensors: `optim.{param index}.{key}`."""
    return {f"optim.{i}.{key}": torch.as_tensor(value)
            for i, state in opt.state_dict()["state"].items() for key, value in state.items()}


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    """Load per-parameter state written by `_optimizer_tensors`; the hyperparameters (the param
    groups) stay the optimizer's own, which the settings check has shown to be the same."""
    state = opt.state_dict()
    for group in state["param_groups"]:
        for i in group["params"]:
            prefix = f"optim.{i}."
            state["state"][i] = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    opt.load_state_dict(state)


def read_meta(path: str | Path) -> dict:
    """The JSON metadata in the header of a checkpoint file."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = (f.metadata() or {}).get(_META_KEY)
    if meta is None:
        raise RunError(f"{path} holds no checkpoint metadata; delete it and train again.")
    return json.loads(meta)


def save(folder: str | Path, model: nn.Module, opt: torch.optim.Optimizer, epoch: int, history: list[dict],
         params: dict) -> None:
    """Write `checkpoint.safetensors` into `folder` atomically (a kill leaves the previous one)."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors.update(_optimizer_tensors(opt))
    meta = {"format_version": FORMAT_VERSION, "epoch": int(epoch), "history": history, "params": params}
    write_safetensors(Path(folder) / CHECKPOINT_FILE, tensors, metadata={_META_KEY: json.dumps(meta)})


def load(folder: str | Path, model: nn.Module, opt: torch.optim.Optimizer, params: dict, name: str,
         may_change: tuple[str, ...] = ()) -> Checkpoint | None:
    """Load the checkpoint in `folder` into `model` and `opt` and return its epoch, history and
    settings; None when there is none. A checkpoint whose settings differ from `params`, other
    than the ones in `may_change`, is refused with a RunError that names them."""
    path = Path(folder) / CHECKPOINT_FILE
    if not path.exists():
        return None
    meta = read_meta(path)
    mine = {k: v for k, v in params.items() if k not in may_change}
    theirs = {k: v for k, v in meta.get("params", {}).items() if k not in may_change}
    diff = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if meta.get("format_version") != FORMAT_VERSION:
        diff = ["format_version", *diff]
    if diff:
        raise RunError(f"The checkpoint in {folder} was written with other settings ({', '.join(diff)}); "
                       f"delete it or pass --rebuild {name}.")
    tensors = read_safetensors(path)
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    _load_optimizer(opt, tensors)
    return Checkpoint(epoch=int(meta["epoch"]), history=list(meta["history"]), params=meta["params"])
