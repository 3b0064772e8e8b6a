"""Models from their sources: presets, local directories, hub names, preparation for use, and each
mistake a user can make answered with one clear sentence."""

import json
import time
from pathlib import Path

import pytest

from vqlc_core.datasets import SourceError
from vqlc_core.models import load_model, prepare, resolve_model

CACHE = Path(__file__).resolve().parents[1] / "cache"  # the project's git-ignored cache: downloads happen once


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
    tok, model = load_model(source)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert prepare(tok, model, source.kind)  # its tokenizer adds no BOS, so one is prepended
    assert tok.is_fast and tok.pad_token is not None and tok.padding_side == "right"
    assert not any(p.requires_grad for p in model.parameters())
