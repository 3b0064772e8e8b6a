"""Several processes under `torchrun`: the process group, this process's rank and device, the
collectives the rest of the code uses, and the two reductions training needs (streamed moments,
summed gradients). Everything is read from torchrun's environment (WORLD_SIZE, RANK,
LOCAL_RANK); in one process every collective is a no-op, chosen once.

torch is imported only where a tensor or a process group is at hand: in one process the checks
(`rank`, `is_main`, `init`, `close`) import none, so a command line that only parses imports no
torch (no process group exists before torch.distributed is imported).
"""

from __future__ import annotations

import itertools
import os
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import torch


def _dist():
    """torch.distributed, imported on first use."""
    import torch.distributed as dist

    return dist


def _joined() -> bool:
    """Whether this process is in a process group (never, before torch.distributed is imported)."""
    if "torch.distributed" not in sys.modules:
        return False
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def _active() -> bool:
    return _joined() and _dist().get_world_size() > 1


def init() -> None:
    """Join the process group torchrun describes (nccl when this machine has CUDA, else gloo);
    nothing in one process or when already joined."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or _joined():
        return
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # Rank 0 alone runs the stages that are not sharded while the others wait at a barrier.
    _dist().init_process_group("nccl" if cuda else "gloo", timeout=timedelta(hours=2))


def close() -> None:
    """Leave the process group, if this process joined one."""
    if _joined():
        _dist().destroy_process_group()


def rank() -> int:
    return _dist().get_rank() if _active() else 0


def world() -> int:
    return _dist().get_world_size() if _active() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    """Wait until every rank gets here."""
    if _active():
        _dist().barrier()


def all_ranks(flag: bool) -> list[bool]:
    """Every rank's `flag`, in rank order (one process: [flag]); every rank must call it."""
    if not _active():
        return [bool(flag)]
    import torch

    return [bool(t.item()) for t in _gather(torch.tensor([int(flag)], device=device()))]


def device() -> str:
    """This process's device: its local GPU (cuda:LOCAL_RANK) when CUDA is available, else cpu."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def local_slice(x: torch.Tensor) -> torch.Tensor:
    """This rank's contiguous part of a global batch (sizes differ by at most one row); the parts
    of ranks 0..N-1, in rank order, are the global batch."""
    return x.tensor_split(world())[rank()] if _active() else x


class Collectives(NamedTuple):
    """all_reduce(t): sum over ranks, in place; broadcast(t): rank 0's t, in place;
    all_gather(t): every rank's t (same shape on every rank), in rank order."""

    all_reduce: Callable[[torch.Tensor], None]
    broadcast: Callable[[torch.Tensor], None]
    all_gather: Callable[[torch.Tensor], list[torch.Tensor]]


def _noop(t: torch.Tensor) -> None:
    return None


def _gather(t: torch.Tensor) -> list[torch.Tensor]:
    import torch

    dist = _dist()
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def collectives() -> Collectives:
    """torch.distributed's collectives when several ranks run, otherwise no-ops. Call it once,
    at construction, and keep the result."""
    if _active():
        dist = _dist()
        return Collectives(dist.all_reduce, lambda t: dist.broadcast(t, src=0), _gather)
    return Collectives(_noop, _noop, lambda t: [t])


def moments(batches: Iterable[torch.Tensor], dim: int, all_reduce: Callable[[torch.Tensor], None],
            device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and variance (d,) of a stream of (B, d) batches, in one pass (float64).

    Every rank reads the same stream; rank r sums batches r, r+N, ..., and the sums and the
    count are then all-reduced, so every rank gets the moments of the whole stream."""
    import torch

    n, s, ss = 0, torch.zeros(dim, dtype=torch.float64), torch.zeros(dim, dtype=torch.float64)
    for x in itertools.islice(batches, rank(), None, world()):
        x = x.double()
        n += len(x)
        s += x.sum(0)
        ss += x.pow(2).sum(0)
    total = torch.cat([torch.tensor([float(n)], dtype=torch.float64), s, ss]).to(device)  # (1 + 2d,)
    all_reduce(total)
    n, s, ss = total.cpu()[0], total.cpu()[1 : 1 + dim], total.cpu()[1 + dim :]
    mean = s / n
    return mean.numpy(), (ss / n - mean.pow(2)).clamp_min(0.0).numpy()


def all_reduce_grads_(params: list[torch.Tensor], all_reduce: Callable[[torch.Tensor], None]) -> None:
    """Sum every gradient over the ranks in one all-reduce of a flat buffer on the first
    parameter's device (fine-tuning's head stays on the CPU beside a model on the GPU). A rank
    that left a parameter without gradient adds zeros; a parameter no rank gave a gradient (one
    the forward does not use, e.g. BERT's pooler) keeps none, as in one process, so the optimizer
    skips it there too instead of decaying it."""
    import torch

    device = params[0].device
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    used = torch.tensor([float(p.grad is not None) for p in params], dtype=grads[0].dtype)
    flat = torch.cat([*(g.reshape(-1).to(device) for g in grads), used.to(device)])
    all_reduce(flat)
    sizes = [p.numel() for p in params]
    parts, used = flat[: sum(sizes)].split(sizes), flat[sum(sizes):].cpu()
    for p, g, n in zip(params, parts, used):
        p.grad = g.view_as(p).to(p.device, copy=True) if n > 0 else None  # its own allocation, as in one process
