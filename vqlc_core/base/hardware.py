"""What the machine it runs on computes fast: whether the CPU does bf16 arithmetic natively (AVX-512 BF16
or AMX), whether bf16 is also the faster precision to train in (AMX), and so which precision an
"auto" setting means.

Where bf16 is emulated (AVX2 or AVX-512 without BF16) a bf16 autocast forward and backward is
slower than fp32, not faster: fine-tuning MiniLM on MR took 2.1 s a step in bf16 against 0.67 s
in fp32 on such a CPU (one thread, batch 32). AVX-512 BF16 alone is not enough either: on a Xeon
with it and without AMX a step took 1.40 s in bf16 against 0.92 s in fp32 on one thread, and 0.82 s
against 0.59 s on two (`bench/finetune_precision.py`), so "auto" trains in bf16 only on AMX, whose
tile units are what make bf16 matrix products several times faster than fp32.

torch is imported by the functions that use it, so the settings (`AUTO`, `DEVICES_HELP`,
`check_device_name`) and a command line that only reads them import none.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

from vqlc_core.base.runio import RunError

AUTO = "auto"
log = logging.getLogger(__name__)


def native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX tiles)."""
    import torch

    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def fast_bf16() -> bool:
    """Whether training in bfloat16 is faster than in float32 on this CPU: where it has AMX tiles
    (see the module's docstring: AVX-512 BF16 alone computes bf16 but was slower to train in)."""
    import torch

    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def resolve_dtype(name: str) -> str:
    """A precision setting with "auto" resolved: "bfloat16" where bf16 is the faster precision to
    train in (`fast_bf16`), "float32" elsewhere; "float32" and "bfloat16" are returned as they are."""
    if name != AUTO:
        return name
    return "bfloat16" if fast_bf16() else "float32"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to `n` while the block runs, and set back after it (the
    dashboard's server explains on one thread; a build it starts runs on every core)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


DEVICES_HELP = "auto (a GPU when there is one, else the CPU), cpu, cuda or cuda:N"


def check_device_name(name: str) -> str:
    """`name` lower-cased when it is a device setting vqlc knows (auto, cpu, cuda, cuda:N), else a
    one-sentence RunError; whether this machine has that device is `resolve_device`'s to say."""
    name = (name or AUTO).strip().lower()
    if name in (AUTO, "cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()):
        return name
    raise RunError(f"--device must be {DEVICES_HELP}, got {name!r}.")


def resolve_device(name: str = AUTO) -> str:
    """A device setting resolved for this process: "auto" is the process's own GPU under torchrun
    (cuda:LOCAL_RANK), cuda:0 in one process with CUDA, else "cpu"; "cuda" is cuda:0 (cuda:LOCAL_RANK
    under torchrun). Raises a one-sentence RunError for a CUDA device this machine lacks."""
    import torch

    name = check_device_name(name)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if name == AUTO:
        return f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if not torch.cuda.is_available():  # cuda or cuda:N from here on
        raise RunError(f"--device {name} needs a CUDA GPU, and torch sees none here (torch {torch.__version__}, "
                       f"{'a CPU-only build' if torch.version.cuda is None else 'CUDA ' + torch.version.cuda}); "
                       "use --device cpu, or install a CUDA build of torch with VQLC_TORCH=cu128 scripts/setup.sh.")
    index = local if name == "cuda" else int(name[5:])
    if index >= torch.cuda.device_count():
        raise RunError(f"--device {name} names GPU {index}, but this machine has "
                       f"{torch.cuda.device_count()} (cuda:0..cuda:{torch.cuda.device_count() - 1}).")
    return f"cuda:{index}"


def free_bytes(device: str) -> int:
    """Memory free for new tensors on `device`: the GPU's free memory, or the machine's available RAM."""
    import torch

    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether `err` is an allocator's out-of-memory error (CUDA's, or a CPU allocation that failed)."""
    import torch

    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


def smaller_batch(err: BaseException, size: int, option: str) -> int:
    """After `err` in a batch of `size`: half the batch when `err` ran out of memory (the cached
    GPU blocks freed first), a one-sentence RunError naming `option` when even one item does
    not fit; any other error is raised again."""
    import torch

    if not is_out_of_memory(err):
        raise err
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if size <= 1:
        raise RunError(f"Out of memory with one text a batch; lower --max-length, free memory, or choose another "
                       f"--device ({option} is already 1).") from err
    log.warning("vqlc: out of memory with %s %d; trying %d", option, size, size // 2)
    return size // 2
