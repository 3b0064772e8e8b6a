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
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.models import resolve_model

    return Backbone.from_source(resolve_model("smollm2-135m", cache_dir=CACHE), max_length=64)


def test_words_line_up_with_the_words_of_the_text(smol):
    text = "The film's pacing isn't great, but Depp-like charm wins."
    _, words = smol.tokenize([text])
    got = [w.word for w in words[0]]
    assert "".join(got) == text.replace(" ", "")
    for w in words[0]:
        assert text[w.start : w.end].strip() == w.word


def test_bos_is_never_a_word_row(smol, mr_texts, tmp_path):
    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store

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


@pytest.fixture(scope="module")
def smol_explainer(smol, mr_texts, tmp_path_factory):
    """A classifier head and K-Means concepts on 80 real MR sentences through SmolLM2."""
    from vqlc_core.data.classifier import Classifier, pooled_features
    from vqlc_core.methods.concepts import ConceptSet
    from vqlc_core.explain.explainer import Explainer
    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store
    from vqlc_core.methods.kmeans import KMeansConcepts

    part = mr_texts.groupby("label").head(40).reset_index(drop=True)
    part["text_id"] = range(len(part))
    feats = pooled_features(smol, part["text"].tolist(), batch_size=16, progress=False)
    clf = Classifier.train(smol, feats, part["label"].to_numpy(), ["negative", "positive"], seed=0)
    store = build_store(smol, part, ExtractConfig(layer=20, batch_size=16), tmp_path_factory.mktemp("smol") / "s",
                        progress=False)
    km = KMeansConcepts(n_concepts=12, seed=0).fit(store)
    cs = ConceptSet.from_assignments("kmeans", store, km.predict_store(store), 12, ["negative", "positive"])
    return Explainer(clf, 20, {"kmeans": (km, cs)}, ig_steps=4)


def test_ablation_through_a_llama_layer_leaves_layer_states_orthogonal(smol, smol_explainer):
    from vqlc_core.explain.ablation import ablate
    from vqlc_core.data.backbone import capture

    cs = smol_explainer.methods["kmeans"][1]
    dirs = cs.vectors[[0, 3]]
    enc, _ = smol.tokenize(["a gorgeous , witty , seductive movie .", "the plot is a mess"])
    with ablate(smol, 20, dirs), capture(smol, 20) as got:
        smol.final_states(enc)
    h = got["h"]
    q, _ = torch.linalg.qr(torch.as_tensor(dirs, dtype=torch.float32).T)
    rel = (h @ q).norm(dim=-1) / h.norm(dim=-1)
    assert rel.max() < 1e-4


def test_decoder_explanations_are_deterministic(smol_explainer):
    text = "an uneven but often funny look at suburban life"
    a = smol_explainer.explain(text).to_dict()
    smol_explainer._cache.clear()
    b = smol_explainer.explain(text).to_dict()
    assert a == b
    assert len(a["methods"]["kmeans"]["word_concepts"]) == len(a["words"]) == len(text.split())
