"""What this machine computes fast: whether the CPU does bf16 arithmetic natively (AVX-512 BF16
or AMX), and so which precision an "auto" setting means.

Where bf16 is emulated (AVX2 or AVX-512 without BF16) a bf16 autocast forward and backward is
slower than fp32, not faster: fine-tuning MiniLM on MR took 2.1 s a step in bf16 against 0.67 s
in fp32 on such a CPU (one thread, batch 32), while on a CPU with AVX-512 BF16 bf16 was the
faster one (fp32 1.57× its step time).
"""

from __future__ import annotations

import torch

AUTO = "auto"


def native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX tiles)."""
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def resolve_dtype(name: str) -> str:
    """A precision setting with "auto" resolved: "bfloat16" where the CPU has native bf16,
    "float32" elsewhere; "float32" and "bfloat16" are returned as they are."""
    if name != AUTO:
        return name
    return "bfloat16" if native_bf16() else "float32"
