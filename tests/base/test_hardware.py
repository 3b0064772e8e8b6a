"""Devices and weight precision: `--device` resolved or refused in one sentence, the dtype the
weights load in, models refused before a byte is read when they cannot fit, and a build with
bfloat16 compute (and one with bfloat16 weights) end to end on the CPU."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vqlc_core.base.hardware import check_device_name, resolve_device, smaller_batch
from vqlc_core.base.runio import RunError, SourceError, read_json
from vqlc_core.pipeline.cli import main
from vqlc_core.data.models import GB, check_fits, choose_weights, parameter_count, resolve_model, weights_bytes

CACHE = Path(__file__).resolve().parents[2] / "cache"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA says")


@no_cuda
def test_auto_is_the_cpu_here_and_cuda_is_refused_in_one_sentence():
    assert resolve_device("auto") == resolve_device("AUTO") == resolve_device("cpu") == "cpu"
    for name in ("cuda", "cuda:1"):
        with pytest.raises(RunError) as err:
            resolve_device(name)
        msg = str(err.value)
        assert "VQLC_TORCH=cu128" in msg and "--device cpu" in msg and "\n" not in msg
    with pytest.raises(RunError, match="--device must be"):
        check_device_name("gpu")


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "tpu"])
def test_the_command_line_refuses_a_device_it_cannot_use_with_exit_2(device, tmp_path, capsys):
    code = main(["build", "--run", "nocuda", "--cache-dir", str(tmp_path), "--device", device, "--limit", "50"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "--device" in err
    assert not (tmp_path / "runs" / "nocuda").exists()  # refused before anything was written


def test_weights_are_chosen_by_mode_device_and_free_memory():
    minilm, smol = resolve_model("minilm"), resolve_model("smollm2-135m", cache_dir=CACHE)
    n = parameter_count(minilm)
    assert 20e6 < n < 25e6  # MiniLM-L6: 22.7M weights, from the files' sizes alone
    assert weights_bytes(minilm, "bfloat16") * 2 == weights_bytes(minilm, "float32")
    assert choose_weights("auto", minilm, "float32", "cpu", full_finetune=True) == "float32"
    assert choose_weights("auto", minilm, "bfloat16", "cpu", False, free=64 * GB) == "float32"
    assert choose_weights("auto", minilm, "float32", "cpu", False, free=GB) == "bfloat16"  # fp32 would not fit
    assert choose_weights("bfloat16", minilm, "float32", "cpu", False) == "bfloat16"
    # on a GPU: the model's own half precision (SmolLM2 ships bfloat16), else --dtype's
    assert choose_weights("auto", smol, "float32", "cuda:0", False) in ("bfloat16", "float32")
    assert choose_weights("auto", minilm, "bfloat16", "cuda:0", False) == "bfloat16"
    assert choose_weights("auto", minilm, "float32", "cuda:0", False) == "float32"
    with pytest.raises(SourceError, match="cannot be fine-tuned in full"):
        choose_weights("float16", minilm, "float32", "cpu", full_finetune=True)


def test_a_model_that_cannot_fit_is_refused_before_loading_and_one_that_can_is_placed():
    minilm = resolve_model("minilm")
    need = weights_bytes(minilm, "float32")
    assert check_fits(minilm, "float32", "cpu", None, free_ram=8 * GB) is None
    with pytest.raises(SourceError) as err:
        check_fits(minilm, "float32", "cpu", None, free_ram=GB // 2)
    msg = str(err.value)
    assert "needs about 1.1 GB" in msg and "0.5 GB" in msg and "\n" not in msg
    assert check_fits(minilm, "float32", "cuda:0", free_gpu=8 * GB, free_ram=8 * GB) == {"": "cuda:0"}
    # weights that fit GPU and CPU together but not the GPU alone: accelerate spreads them
    assert check_fits(minilm, "float32", "cuda:1", free_gpu=need // 2, free_ram=8 * GB) == "auto"
    with pytest.raises(SourceError, match="several GPUs under torchrun"):
        check_fits(minilm, "float32", "cuda:0", free_gpu=need // 2, free_ram=need // 2)


def test_out_of_memory_halves_the_batch_and_names_the_option_at_one():
    assert smaller_batch(torch.OutOfMemoryError("CUDA out of memory"), 16, "--batch-size") == 8
    assert smaller_batch(RuntimeError("DefaultCPUAllocator: can't allocate memory: out of memory"), 3, "--batch-size") == 1
    with pytest.raises(RunError, match="--batch-size is already 1"):
        smaller_batch(MemoryError(), 1, "--batch-size")
    with pytest.raises(ValueError):  # any other error is not a memory one and goes on up
        smaller_batch(ValueError("bad"), 16, "--batch-size")


@pytest.mark.slow
def test_the_apptest_run_builds_end_to_end_with_bfloat16_compute_and_with_bfloat16_weights(tmp_path):
    """The apptest settings on 120 MR sentences (MiniLM, K = 10, full fine-tuning) with --dtype
    bfloat16, and a frozen MiniLM loaded in bfloat16 (--weights bfloat16): both finish every
    stage, record how their weights were loaded, and give concepts and a classifier that beats
    chance."""
    from vqlc_core.pipeline.config import preset
    from vqlc_core.pipeline.build import build

    cache = tmp_path / "cache"  # its own runs; the downloads, datasets and models are the repository's
    cache.mkdir()
    for sub in ("downloads", "datasets", "models"):
        (cache / sub).symlink_to(CACHE / sub, target_is_directory=True)
    try:
        runs = {
            # VQLC alone and no instruments: what is checked is the bf16 path through every stage, and
            # a bf16 backward is slow on a CPU (the other methods add fits and ablations, nothing bf16)
            "bf16-compute": preset("default", run="bf16-compute", limit=120, n_concepts=10, faithfulness_texts=10,
                                   cache_dir=cache, dtype="bfloat16", device="cpu", methods=["vqlc"],
                                   instrument_texts=0),
            "bf16-weights": preset("default", run="bf16-weights", limit=120, n_concepts=10, faithfulness_texts=10,
                                   cache_dir=cache, weights="bfloat16", finetune="none", methods=["vqlc"],
                                   instrument_texts=0),
        }
        for name, cfg in runs.items():
            run = build(cfg)
            assert run.is_built(), name
            extract = run.manifest.data["stages"]["extract"]
            want = "float32" if name == "bf16-compute" else "bfloat16"
            assert extract["weights"]["dtype"] == want and extract["weights"]["device"] == "cpu"
            assert run.manifest.data["config"]["extract"]["dtype"] == ("bfloat16" if name == "bf16-compute"
                                                                       else "float32")
            if name == "bf16-compute":  # Integrated Gradients runs in float32 beside a bf16 forward
                ig = read_json(run.dir / "eval" / "measures.json")["integrated_gradients"]
                assert ig["completeness_error_max"] < 1e-3, ig
            acc = run.classifier_metrics["accuracy"]
            print(f"{name}: accuracy {acc}")
            assert acc["train"] > 0.6 and (acc["dev"] + acc["test"]) / 2 > 0.55, (name, acc)
            cs = run.concepts("vqlc")
            assert cs.n_concepts >= 10 and len(np.unique(cs.assignments)) > 5 and np.isfinite(run.store.read(np.arange(50))).all()
            # the dashboard's explainer on the run as it is opened again, on this machine's device
            from vqlc_core.pipeline.run import open_run

            again = open_run(name, cache_dir=cache)
            ex = again.explainer(["vqlc"]).explain("a gripping and beautifully acted film")
            assert 0.5 <= ex.confidence <= 1 and ex.methods["vqlc"].prediction_concepts
            assert abs(sum(ex.attributions) - 1) < 1e-4
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_a_thread_setting_holds_for_its_block_and_is_set_back():
    from vqlc_core.base.hardware import torch_threads, usable_cores

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
        with torch_threads(usable_cores()):  # a build started from the server, which explains on one
            assert torch.get_num_threads() == usable_cores() >= 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
