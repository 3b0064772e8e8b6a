"""Models from their sources: presets, local directories, GGUF files, hub names, preparation for use, and each
mistake a user can make answered with one clear sentence."""

import json
import logging
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from vqlc_core.base.runio import SourceError
from vqlc_core.data.gguf_files import conversion_dtype, gguf_architectures, smollm2_gguf
from vqlc_core.data.models import load_model, prepare, resolve_model

CACHE = Path(__file__).resolve().parents[2] / "cache"  # the project's git-ignored cache: downloads happen once


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    CACHE.mkdir(exist_ok=True)
    return CACHE


def test_minilm_resolves_loads_and_prepares_as_a_frozen_mean_pooled_encoder():
    source = resolve_model("minilm")
    assert (source.kind, source.is_classifier, source.pooling) == ("encoder", False, "mean")
    tok, model = load_model(source)
    assert tok.is_fast
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    assert prepare(tok, model, source.kind) is False  # an encoder never gets a BOS prepended
    assert tok.padding_side == "right"
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_a_local_directory_resolves_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}))
    source = resolve_model(str(tmp_path))
    assert (source.kind, source.is_classifier, source.pooling) == ("decoder", True, "last")


@pytest.mark.parametrize("spec, phrase", [
    ("bert-base-uncased", "presets minilm, smollm2-135m"),
    ("nobody/no-such-model", "could not be loaded from the Hugging Face hub \\(offline or not found\\)"),
    ("/nowhere/model.gguf", "was not found"),
])
def test_unusable_models_are_one_helpful_sentence(spec, phrase, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no 30 s of retries in tests
    with pytest.raises(SourceError, match=phrase) as info:
        resolve_model(spec)
    assert "\n" not in str(info.value)


def test_a_directory_without_config_is_refused(tmp_path):
    with pytest.raises(SourceError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_a_model_that_cannot_load_keeps_its_cause(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(SourceError, match="could not be loaded from") as info:
        load_model(resolve_model(str(tmp_path)))
    assert "\n" not in str(info.value) and info.value.__cause__ is not None


@pytest.mark.slow
def test_smollm2_converts_once_to_a_30_layer_decoder(cache_dir):
    source = resolve_model("smollm2-135m", cache_dir=cache_dir)
    assert (source.kind, source.is_classifier, source.pooling) == ("decoder", False, "last")
    weights = Path(source.path) / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    start = time.perf_counter()
    again = resolve_model("smollm2-135m", cache_dir=cache_dir)
    assert time.perf_counter() - start < 1
    assert again == source and weights.stat().st_mtime_ns == stamp
    if conversion_dtype() == torch.bfloat16:  # half the fp32 copy, in a folder of its own
        assert Path(source.path).name == "smollm2-135m-bf16" and weights.stat().st_size < 300e6
    with safe_open(weights, "pt") as f:
        assert f.get_slice("model.embed_tokens.weight").get_dtype() == ("BF16" if conversion_dtype() == torch.bfloat16
                                                                          else "F32")
    tok, model = load_model(source)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert prepare(tok, model, source.kind)  # its tokenizer adds no BOS, so one is prepended
    assert tok.is_fast and tok.pad_token is not None and tok.padding_side == "right"
    assert not any(p.requires_grad for p in model.parameters())


def _gguf(path: Path, architecture: str, tokenizer: str) -> Path:
    """A small GGUF file with the metadata llama.cpp writes and one tensor."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tokenizer_model(tokenizer)
    writer.add_token_list(["<unk>", "a", "b"])
    writer.add_tensor("token_embd.weight", np.zeros((3, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("architecture, tokenizer, phrase", [
    ("rwkv6", "rwkv", "holds a 'rwkv6' model, an architecture transformers .* cannot load from GGUF"),
    ("t5", "t5", "holds a 't5' model, an encoder-decoder, which vqlc cannot use"),
    ("llama", "bert", "has a 'bert' tokenizer, which transformers .* cannot build from GGUF"),
])
def test_a_gguf_vqlc_cannot_use_is_refused_in_one_sentence_before_anything_is_written(
        architecture, tokenizer, phrase, tmp_path):
    gguf = _gguf(tmp_path / f"{architecture}.gguf", architecture, tokenizer)
    with pytest.raises(SourceError, match=phrase) as info:
        resolve_model(str(gguf), cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value) and "llama" in str(info.value)  # names what does load
    assert not (tmp_path / "cache").exists()


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(SourceError, match="could not be read as a GGUF file"):
        resolve_model(str(tmp_path / "notes.gguf"), cache_dir=tmp_path)


def test_the_gguf_architectures_are_the_decoders_transformers_loads():
    usable = gguf_architectures()
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gpt2"} <= set(usable)
    assert not {"t5", "umt5", "general", "tokenizer"} & set(usable)


def test_conversion_is_bf16_exactly_where_the_cpu_computes_in_bf16():
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert conversion_dtype() == (torch.bfloat16 if native else torch.float32)


def test_a_conversion_says_its_size_first_and_stops_before_loading_when_the_disk_is_too_small(
        cache_dir, tmp_path, monkeypatch, caplog):
    gguf = smollm2_gguf(cache_dir)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 10**6, 10**6))
    start = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="vqlc_core.data.gguf_files"), \
            pytest.raises(SourceError, match=r"needs about \d+ MB on disk and .* has 1 MB free") as info:
        resolve_model(str(gguf), cache_dir=tmp_path)
    assert time.perf_counter() - start < 5  # from the file's header: the model was never loaded
    size = 134.5 * (2 if conversion_dtype() == torch.bfloat16 else 4)  # 134.5M weights
    assert f"needs about {size:.0f} MB" in str(info.value) and f"writing {size:.0f} MB" in caplog.text
    assert not list((tmp_path / "models").iterdir())
