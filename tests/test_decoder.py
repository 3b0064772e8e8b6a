"""The decoder path on the real SmolLM2-135M: leading-space BPE word alignment, BOS handling,
last-token pooling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CACHE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    from vqlc_core.backbone import Backbone
    from vqlc_core.sources import resolve_model

    return Backbone.from_source(resolve_model("smollm2-135m", cache_dir=CACHE), max_length=64)


def test_words_line_up_with_the_words_of_the_text(smol):
    text = "The film's pacing isn't great, but Depp-like charm wins."
    _, words = smol.tokenize([text])
    got = [w.word for w in words[0]]
    assert "".join(got) == text.replace(" ", "")
    for w in words[0]:
        assert text[w.start : w.end].strip() == w.word


def test_bos_is_never_a_word_row(smol, mr_texts, tmp_path):
    from vqlc_core.extract import ExtractConfig, build_store

    enc, words = smol.tokenize(["hello there", "a"])
    assert smol.add_bos and (enc["input_ids"][:, 0] == smol.tokenizer.bos_token_id).all()
    assert all(0 not in w.tokens for ws in words for w in ws)
    store = build_store(smol, mr_texts.iloc[:12].reset_index(drop=True), ExtractConfig(layer=10, batch_size=4),
                        tmp_path / "s", progress=False)
    t = store.tokens
    assert not t["word"].str.contains("im_start").any()
    texts = mr_texts["text"].iloc[:12].tolist()
    for i, text in enumerate(texts):
        ws = t.loc[(t["text_id"] == i) & (t["kind"] == "word"), "word"].tolist()
        assert "".join(ws) == "".join(text.split())[: len("".join(ws))]
        assert ws[0] == text.split()[0][: len(ws[0])]  # the first row is the text's first word, not BOS


def test_last_token_pooling_reads_the_last_real_token_despite_padding(smol):
    texts = ["a short one", "a much longer sentence that forces padding onto the short one"]
    enc, _ = smol.tokenize(texts)
    assert enc["attention_mask"][0].sum() < enc["attention_mask"][1].sum()
    pooled = smol.pool(smol.states_at(enc, 12), enc["attention_mask"], "last")
    alone, _ = smol.tokenize(texts[:1])
    h = smol.states_at(alone, 12)
    torch.testing.assert_close(pooled[0], h[0, -1], rtol=1e-3, atol=1e-3)
