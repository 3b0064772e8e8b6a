"""Fine-tuning on the real MiniLM and real MR sentences: a small subset, so each run takes seconds."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import CACHE
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.classifier import Classifier
from vqlc_core.base.options import flag
from vqlc_core.base.runio import RunError
from vqlc_core.data.settings import FinetuneConfig
from vqlc_core.data.finetune import finetune, load_finetuned
from vqlc_core.data.models import resolve_model
from vqlc_core.data.tuning import bucketed_batches, plain_state

# The build's defaults but float32 (bf16 autocast is slow on CPUs without BF16) and no early stop.
CFG = dict(finetune_epochs=2, finetune_batch_size=16, finetune_dtype="float32", finetune_patience=0)


def subset(mr_texts: pd.DataFrame, **per_class: int) -> pd.DataFrame:
    """The first `n` texts of each class in each named split."""
    parts = [mr_texts[mr_texts["split"] == split].groupby("label").head(n) for split, n in per_class.items()]
    return pd.concat(parts).reset_index(drop=True)


def fresh_backbone() -> Backbone:
    """A backbone of its own: fine-tuning changes the model in place, and `minilm` is shared."""
    return Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=64)


@pytest.fixture(scope="module")
def texts(mr_texts):
    """54 real MR sentences, half of each class: 48 train and 6 test. No dev texts, so the last
    epoch is kept and the weights compared below are those after all the training."""
    return subset(mr_texts, train=24, test=3)


@pytest.fixture(scope="module")
def texts_with_dev(mr_texts):
    return subset(mr_texts, train=24, dev=6)


@pytest.fixture(scope="module")
def class_names():
    return ["negative", "positive"]


@pytest.fixture(scope="module")
def uninterrupted(texts, class_names, tmp_path_factory):
    """An uninterrupted 2-epoch full fine-tuning: (backbone, head, info, out_dir)."""
    out = tmp_path_factory.mktemp("ft_full")
    bb = fresh_backbone()
    head, info = finetune(bb, texts, class_names, FinetuneConfig(**CFG), out, progress=False)
    return bb, head, info, out


def weights(bb: Backbone, head) -> dict[str, torch.Tensor]:
    return {**{k: v.clone() for k, v in plain_state(bb.model).items()}, "head.weight": head.weight.clone(),
            "head.bias": head.bias.clone()}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def test_finetuning_changes_the_model_and_leaves_it_frozen_in_eval_mode(uninterrupted):
    bb, head, info, out = uninterrupted
    before = fresh_backbone()
    changed = [k for k, v in plain_state(before.model).items() if not torch.equal(v, plain_state(bb.model)[k])]
    assert len(changed) > 50
    assert not bb.model.training
    assert not any(p.requires_grad for p in bb.model.parameters())
    assert not any(p.requires_grad for p in head.parameters())
    assert [h["epoch"] for h in info["history"]] == [1, 2] and info["finished"]
    assert sorted(p.name for p in out.iterdir()) == ["finetune.json", "head.safetensors", "model.safetensors"]
    saved = json.loads((out / "finetune.json").read_text())
    assert saved["chosen_epoch"] == 2 and saved["config"]["mode"] == "full"


def test_same_seed_twice_gives_identical_weights(uninterrupted, texts, class_names, tmp_path):
    bb, head, _, _ = uninterrupted
    again = fresh_backbone()
    head2, _ = finetune(again, texts, class_names, FinetuneConfig(**CFG), tmp_path, progress=False)
    assert_same_weights(weights(bb, head), weights(again, head2))


def test_a_run_killed_after_epoch_1_resumes_to_the_same_weights(uninterrupted, texts, class_names, tmp_path):
    bb, head, _, _ = uninterrupted
    killed = fresh_backbone()
    _, info = finetune(killed, texts, class_names, FinetuneConfig(**CFG), tmp_path, stop_after_epochs=1,
                       progress=False)
    assert not info["finished"] and (tmp_path / "checkpoint" / "checkpoint.safetensors").is_file()
    assert not (tmp_path / "model.safetensors").exists()
    resumed = fresh_backbone()
    head2, info2 = finetune(resumed, texts, class_names, FinetuneConfig(**CFG), tmp_path, progress=False)
    assert info2["resumed_from_epoch"] == 1 and [h["epoch"] for h in info2["history"]] == [1, 2]
    assert_same_weights(weights(bb, head), weights(resumed, head2))
    assert not (tmp_path / "checkpoint").exists()


@pytest.mark.slow
def test_a_lora_run_in_bfloat16_killed_after_epoch_1_resumes_to_the_same_weights(texts, class_names, tmp_path):
    cfg = FinetuneConfig(**{**CFG, "finetune_dtype": "bfloat16"}, finetune="lora")
    whole = fresh_backbone()
    head, _ = finetune(whole, texts, class_names, cfg, tmp_path / "whole", progress=False)
    finetune(fresh_backbone(), texts, class_names, cfg, tmp_path / "killed", stop_after_epochs=1, progress=False)
    resumed = fresh_backbone()
    head2, _ = finetune(resumed, texts, class_names, cfg, tmp_path / "killed", progress=False)
    assert_same_weights(weights(whole, head), weights(resumed, head2))


def test_a_checkpoint_from_other_settings_is_refused(texts, class_names, tmp_path):
    few = texts.groupby("label").head(10)
    cfg = dict(CFG, finetune_train_blocks=1)
    finetune(fresh_backbone(), few, class_names, FinetuneConfig(**cfg), tmp_path, stop_after_epochs=1, progress=False)
    with pytest.raises(RunError, match=r"other settings \(config\); delete it or pass --rebuild finetune"):
        finetune(fresh_backbone(), few, class_names, FinetuneConfig(**cfg, finetune_lr=1e-4), tmp_path, progress=False)


def test_a_batch_in_two_parts_trains_the_one_part_model(uninterrupted, texts, class_names, tmp_path):
    """--finetune-parts 2: each batch run in two halves, their gradients summed, each half with its
    rows of the whole batch's dropout masks (MiniLM's dropout is on): the same model up to float
    rounding (measured: max difference 1.7e-6), where other masks would move it further."""
    bb = fresh_backbone()
    head, info = finetune(bb, texts, class_names, FinetuneConfig(**CFG, finetune_parts=2), tmp_path, progress=False)
    assert info["config"]["parts"] == 2
    one = weights(*uninterrupted[:2])
    two = weights(bb, head)
    worst = max(float((one[k] - two[k]).abs().max()) for k in one)
    print(f"max |one part - two parts| = {worst:.2e}")
    assert worst < 1e-4
    assert [h["loss"] for h in info["history"]] == pytest.approx([h["loss"] for h in uninterrupted[2]["history"]],
                                                                rel=1e-5)


def test_the_epoch_with_the_best_dev_accuracy_is_kept_the_probe_of_the_frozen_model_being_epoch_0(
        texts_with_dev, class_names, tmp_path):
    bb = fresh_backbone()
    cfg = FinetuneConfig(**CFG, finetune_train_blocks=1, finetune_probe_init="on")
    head, info = finetune(bb, texts_with_dev, class_names, cfg, tmp_path, progress=False)
    assert [h["epoch"] for h in info["history"]] == [0, 1, 2]
    dev_accuracy = [h["dev_accuracy"] for h in info["history"]]
    assert info["chosen_epoch"] == info["history"][dev_accuracy.index(max(dev_accuracy))]["epoch"]
    dev = texts_with_dev[texts_with_dev["split"] == "dev"]
    kept = Classifier(bb, class_names, head).predict_proba(dev["text"].tolist()).argmax(1)
    assert (kept == dev["label"].to_numpy()).mean() == info["best_dev_accuracy"]


def test_saved_weights_loaded_into_a_fresh_backbone_give_the_same_logits(uninterrupted, texts, class_names):
    bb, head, _, out = uninterrupted
    fresh = fresh_backbone()
    loaded_head = load_finetuned(fresh, out)
    enc, _ = bb.tokenize(texts["text"].tolist()[:12])
    with torch.no_grad():
        expected = Classifier(bb, class_names, head).logits(enc)
        got = Classifier(fresh, class_names, loaded_head).logits(enc)
    assert torch.equal(expected, got)
    assert not fresh.model.training and not any(p.requires_grad for p in fresh.model.parameters())


def test_weights_of_another_shape_are_refused_with_one_sentence(uninterrupted, tmp_path):
    _, _, _, out = uninterrupted
    for name in ("finetune.json", "head.safetensors", "model.safetensors"):
        shutil.copy(out / name, tmp_path / name)
    state = plain_state(fresh_backbone().model)
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"][:100]
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(RunError, match=r"embeddings\.word_embeddings\.weight has shape \(100, 384\)"):
        load_finetuned(fresh_backbone(), tmp_path)


@pytest.mark.slow
def test_lora_is_merged_into_a_plain_model_that_loads_like_any_other(texts, class_names, tmp_path):
    bb = fresh_backbone()
    keys = set(plain_state(bb.model))
    cfg = FinetuneConfig(finetune="lora", finetune_epochs=1, finetune_batch_size=16)
    head, info = finetune(bb, texts, class_names, cfg, tmp_path, progress=False)
    assert set(plain_state(bb.model)) == keys  # no adapter left behind
    assert info["trainable_parameters"] < sum(p.numel() for p in bb.model.parameters()) / 50  # adapters + head
    fresh = fresh_backbone()
    loaded_head = load_finetuned(fresh, tmp_path)
    enc, _ = bb.tokenize(texts["text"].tolist()[:12])
    with torch.no_grad():
        assert torch.equal(Classifier(bb, class_names, head).logits(enc),
                           Classifier(fresh, class_names, loaded_head).logits(enc))


def test_batches_cover_every_text_once_in_a_seeded_order():
    import numpy as np

    lengths = np.arange(100) % 17
    a = bucketed_batches(lengths, 8, np.random.default_rng([0, 1]))
    b = bucketed_batches(lengths, 8, np.random.default_rng([0, 1]))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(100))


@pytest.mark.parametrize("field, value", [("finetune", "qlora"), ("finetune_epochs", 0), ("finetune_batch_size", -1),
                                          ("finetune_lr", 0.0), ("finetune_lora_rank", 0),
                                          ("finetune_train_blocks", -2), ("finetune_dtype", "float16"),
                                          ("finetune_patience", -1), ("finetune_probe_init", "yes")])
def test_a_bad_config_value_is_a_run_error_naming_its_flag(field, value):
    with pytest.raises(RunError) as err:
        FinetuneConfig(**{field: value})
    assert str(err.value).startswith(flag(FinetuneConfig, field) + " ") and str(err.value).count(". ") == 0


def test_too_many_train_blocks_is_a_run_error(minilm, texts, class_names, tmp_path):
    with pytest.raises(RunError, match="--finetune-train-blocks is 9 but minilm has only 6 blocks"):
        finetune(minilm, texts, class_names, FinetuneConfig(finetune_train_blocks=9), tmp_path, progress=False)


def test_every_field_has_help_for_the_command_line():
    from dataclasses import fields

    assert all(f.metadata.get("help") for f in fields(FinetuneConfig))


def test_the_time_estimate_changes_nothing_the_training_computes(uninterrupted, texts, class_names, tmp_path):
    bb, head, info, _ = uninterrupted
    assert info["estimated_seconds"] > 0 and info["steps"] == 2 * 3  # 48 texts in batches of 16, two epochs
    plain = fresh_backbone()
    head2, info2 = finetune(plain, texts, class_names, FinetuneConfig(**CFG), tmp_path, progress=False,
                            estimate_time=False)
    assert info2["estimated_seconds"] is None
    assert_same_weights(weights(bb, head), weights(plain, head2))


def test_max_steps_caps_the_run_and_the_estimate_says_how(texts, class_names, tmp_path, caplog):
    caplog.set_level("INFO", logger="vqlc_core.data.finetune")
    head, info = finetune(fresh_backbone(), texts, class_names, FinetuneConfig(**CFG, finetune_max_steps=4), tmp_path,
                          progress=False)
    assert info["steps"] == 4 and [h["epoch"] for h in info["history"]] == [1, 2] and info["finished"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fine-tune: about")]
    assert len(said) == 1 and "for 4 steps" in said[0] and "--finetune-max-steps" in said[0] and "2 dev passes" \
        not in said[0]
    with pytest.raises(RunError, match="--finetune-max-steps must be at least 1"):
        FinetuneConfig(finetune_max_steps=0)


def _fine_tune(cmd: list[str]) -> None:
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(CACHE.parent)}
    out = subprocess.run(cmd, cwd=CACHE.parent, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_two_ranks_fine_tune_the_one_process_model(tmp_path):
    """DistributedDataParallel's scheme by hand: each rank its part of every global batch, the
    gradients summed, and each row's dropout mask the one one process draws for it. With
    MiniLM's dropout on (hidden and attention, p = 0.1), two ranks under torchrun (gloo) train
    one process's model bit for bit when that process runs each batch in the same two parts
    (`--finetune-parts 2`): the same parts' gradients, added once (measured: 0 of 22.7M weights
    differ; before a parameter no forward uses, BERT's pooler, kept its missing gradient on the
    ranks as in one process, AdamW decayed it there and 1.1M weights differed by up to 2.0e-6)."""
    import sys

    import numpy as np

    from vqlc_core.base.runio import read_safetensors

    script = str(CACHE.parent / "tests" / "data" / "distributed_finetune.py")
    _fine_tune([sys.executable, script, str(tmp_path / "one"), "--parts", "2"])
    _fine_tune([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script,
                str(tmp_path / "two")])
    one, two = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("one", "two"))
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert two["chosen_epoch"] == one["chosen_epoch"]
    assert [h["dev_accuracy"] for h in two["history"]] == [h["dev_accuracy"] for h in one["history"]]
    np.testing.assert_allclose([h["loss"] for h in two["history"]], [h["loss"] for h in one["history"]], rtol=1e-4)
    for name in ("model.safetensors", "head.safetensors"):
        a, b = read_safetensors(tmp_path / "one" / name), read_safetensors(tmp_path / "two" / name)
        assert a.keys() == b.keys()
        differ = sum(int((a[k] != b[k]).sum()) for k in a)
        print(f"{name}: {differ} weights differ")
        assert differ == 0, name
    assert not (tmp_path / "two" / "checkpoint").exists()
