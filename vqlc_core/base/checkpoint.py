"""Training checkpoints: a model's state_dict, its optimizer's state, the epoch reached, the
history so far and the settings of the fit, in one safetensors file whose header holds the JSON
metadata, so one atomic rename writes both and they can never disagree. Never pickle.

A fit may keep more in it: named tensors of its own (e.g. the best epoch's weights) and more
JSON (e.g. the step reached); and the model may be a dict of named parameters (e.g. only the
ones it trains) instead of a module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from vqlc_core.base.runio import RunError, read_safetensors, write_safetensors

CHECKPOINT_FILE = "checkpoint.safetensors"
FORMAT_VERSION = 1
_META_KEY = "checkpoint"


@dataclass
class Checkpoint:
    """What a checkpoint holds besides the tensors loaded into the model and optimizer."""

    epoch: int  # epochs completed
    history: list[dict]  # one entry per completed epoch
    params: dict  # the settings the fit was started with
    extra: dict = field(default_factory=dict)  # the fit's own JSON metadata, as saved
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # the fit's own named tensors, as saved


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


def _weights(model: nn.Module | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return model.state_dict() if isinstance(model, nn.Module) else model


def save(folder: str | Path, model: nn.Module | dict[str, torch.Tensor], opt: torch.optim.Optimizer, epoch: int,
         history: list[dict], params: dict, extra: dict | None = None,
         tensors: dict[str, torch.Tensor] | None = None) -> None:
    """Write `checkpoint.safetensors` into `folder` atomically (a kill leaves the previous one):
    `model`'s weights (a module's state_dict, or a dict of named tensors), the optimizer's state,
    and the fit's own `tensors` and JSON `extra`, which `load` returns as they were."""
    out = {f"model.{k}": v for k, v in _weights(model).items()}
    out.update(_optimizer_tensors(opt))
    out.update({f"extra.{k}": v for k, v in (tensors or {}).items()})
    meta = {"format_version": FORMAT_VERSION, "epoch": int(epoch), "history": history, "params": params}
    if extra:
        meta["extra"] = extra
    write_safetensors(Path(folder) / CHECKPOINT_FILE, out, metadata={_META_KEY: json.dumps(meta)})


def load(folder: str | Path, model: nn.Module | dict[str, torch.Tensor], opt: torch.optim.Optimizer, params: dict,
         name: str, may_change: tuple[str, ...] = ()) -> Checkpoint | None:
    """Load the checkpoint in `folder` into `model` (a module, or the dict of named parameters
    it was saved from, copied into in place) and `opt`, and return its epoch, history, settings
    and the fit's own metadata and tensors; None when there is none. A checkpoint whose settings
    differ from `params`, other than the ones in `may_change`, is refused with a RunError that
    names them."""
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
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    if isinstance(model, nn.Module):
        model.load_state_dict(weights)
    else:
        with torch.no_grad():
            for k, p in model.items():
                p.copy_(weights[k])
    _load_optimizer(opt, tensors)
    return Checkpoint(epoch=int(meta["epoch"]), history=list(meta["history"]), params=meta["params"],
                      extra=meta.get("extra", {}),
                      tensors={k[len("extra."):]: v for k, v in tensors.items() if k.startswith("extra.")})
