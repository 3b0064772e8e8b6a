"""The activation store built from the real MiniLM on real MR sentences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vqlc_core.data.settings import ExtractConfig
from vqlc_core.data.extract import build_store
from vqlc_core.data.store import ActivationStore

LAYER = 4


@pytest.fixture(scope="module")
def store(minilm, mr_texts, tmp_path_factory):
    cfg = ExtractConfig(layer=LAYER, batch_size=16, chunk_texts=64, shard_rows=1000)
    return build_store(minilm, mr_texts, cfg, tmp_path_factory.mktemp("store") / "store", progress=False)


def test_store_has_one_row_per_word_plus_one_per_text(store, minilm, mr_texts):
    _, words = minilm.tokenize(mr_texts["text"].tolist())
    n_words = sum(len(w) for w in words)
    assert store.n_rows == n_words + len(mr_texts)
    t = store.tokens
    assert (t["kind"] == "pred").sum() == len(mr_texts)
    assert (t.loc[t["kind"] == "pred", "word_index"] == -1).all()
    # row order: text order, words in order, the prediction row last
    first = t[t["text_id"] == 7]
    assert first["word_index"].tolist() == list(range(len(first) - 1)) + [-1]
    assert first.loc[first["kind"] == "word", "word"].tolist() == [w.word for w in words[7]]


def test_word_row_equals_the_layer_state_at_its_last_subword(store, minilm, mr_texts):
    i = 11
    enc, words = minilm.tokenize([mr_texts["text"][i]])
    with torch.inference_mode():
        full = minilm.base(**{k: enc[k] for k in ("input_ids", "attention_mask")}, output_hidden_states=True)
    h = full.hidden_states[LAYER][0]
    t = store.tokens
    rows = np.flatnonzero((t["text_id"] == i).to_numpy() & (t["kind"] == "word").to_numpy())
    got = store.read(rows)
    want = torch.stack([h[w.tokens[-1]] for w in words[0]]).numpy()
    np.testing.assert_allclose(got, want.astype(np.float16).astype(np.float32), rtol=2e-3, atol=2e-3)


def test_early_exit_states_equal_a_full_forward(minilm, mr_texts):
    enc, _ = minilm.tokenize(mr_texts["text"][:8].tolist())
    early = minilm.states_at(enc, LAYER)
    with torch.inference_mode():
        full = minilm.base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                           output_hidden_states=True).hidden_states[LAYER]
    m = enc["attention_mask"].bool()
    cos = torch.nn.functional.cosine_similarity(early[m], full[m], dim=-1)
    assert cos.min() >= 0.999


def test_early_exit_runs_no_block_above_the_layer(minilm, mr_texts):
    ran = []
    handles = [b.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, b in enumerate(minilm.blocks)]
    try:
        enc, _ = minilm.tokenize(mr_texts["text"][:2].tolist())
        minilm.states_at(enc, 2)
    finally:
        for h in handles:
            h.remove()
    assert ran == [0, 1]


def test_a_resumed_extraction_equals_an_uninterrupted_one(minilm, mr_texts, store, tmp_path):
    cfg = ExtractConfig(layer=LAYER, batch_size=16, chunk_texts=64, shard_rows=1000)
    out = tmp_path / "store"
    assert build_store(minilm, mr_texts, cfg, out, progress=False, stop_after_chunks=2) is None
    assert not (out / "store.json").exists()
    assert build_store(minilm, mr_texts, cfg, out, progress=False, stop_after_chunks=1) is None
    resumed = build_store(minilm, mr_texts, cfg, out, progress=False)
    assert resumed.n_rows == store.n_rows
    np.testing.assert_array_equal(resumed.read_all(), store.read_all())
    assert resumed.tokens.equals(store.tokens)


def test_one_epoch_of_the_reader_yields_every_row_once(store):
    seen = np.concatenate([b.numpy() for b in store.iter_batches(333, shuffle=True, seed=3)])
    assert len(seen) == store.n_rows
    everything = store.read_all()
    key = lambda a: np.lexsort(a.T[::-1])  # noqa: E731 - sort rows lexicographically
    np.testing.assert_array_equal(seen[key(seen)], everything[key(everything)])


def test_reader_respects_a_row_subset_and_differs_between_seeds(store):
    rows = np.arange(0, store.n_rows, 3)
    a = np.concatenate([b.numpy() for b in store.iter_batches(100, seed=1, rows=rows)])
    b = np.concatenate([b.numpy() for b in store.iter_batches(100, seed=2, rows=rows)])
    assert len(a) == len(rows) and not np.array_equal(a, b)


def test_opening_a_store_with_a_truncated_shard_says_which(store, tmp_path):
    import shutil

    from vqlc_core.base.runio import RunError

    copy = tmp_path / "copy"
    shutil.copytree(store.path, copy)
    shard = copy / store.meta["shards"][0]
    shard.write_bytes(shard.read_bytes()[:-4000])
    with pytest.raises(RunError, match="vectors_00000"):
        ActivationStore(copy)
