"""A hub name is told from a preset or a path without torch, and a build asked for a hub model it
cannot reach stops in one sentence before it reads any data."""

from __future__ import annotations

import socket
import time

import pytest

from vqlc_core.data import hub
from vqlc_core.pipeline.cli import main


@pytest.mark.parametrize("spec, named", [
    ("meta-llama/Llama-3.2-1B", True), ("minilm", False), ("smollm2-135m", False),
    ("./models/mine", False), ("/abs/model", False), ("~/m/x", False), ("org/model.gguf", False),
    ("a/b/c", False), ("bert-base-uncased", False),
])
def test_a_hub_name_is_org_slash_name_and_nothing_else(spec, named):
    assert hub.is_hub_name(spec) is named


def test_an_existing_folder_named_like_a_hub_model_is_a_folder(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not hub.is_hub_name("org/name")


def test_a_hub_that_drops_packets_is_out_of_reach_within_the_timeout(monkeypatch):
    import huggingface_hub.constants

    def silent(address, timeout):
        time.sleep(min(timeout, 0.2))
        raise TimeoutError("timed out")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(socket, "create_connection", silent)
    assert hub.hub_reachable(timeout=0.2) is False


def test_a_build_of_an_unreachable_hub_model_is_one_sentence_and_builds_nothing(tmp_path, capsys):
    t0 = time.perf_counter()
    assert main(["build", "--model", "some/hub-model", "--run", "x", "--cache-dir", str(tmp_path)]) == 2
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err.strip()
    assert err.startswith("vqlc: error: Model 'some/hub-model' could not be loaded from the Hugging Face hub")
    assert "\n" not in err and not (tmp_path / "runs" / "x").exists()
