"""The evaluation's sentences shared among ranks: each rank's share keeps every sentence's index,
and the faithfulness rows of two shares, put in the table's order, are the rows of the whole list
(the apptest run's explainer, real MiniLM; up to the float rounding of other batch shapes).
tests/pipeline/test_stages.py runs the same under torchrun."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vqlc_core.base import distributed
from vqlc_core.evaluate import shards
from vqlc_core.evaluate.evaluation import faithfulness_sentences
from vqlc_core.evaluate.faithfulness import faithfulness


def _as_rank(monkeypatch, r: int, n: int) -> None:
    monkeypatch.setattr(distributed, "rank", lambda: r)
    monkeypatch.setattr(distributed, "world", lambda: n)


def test_each_rank_takes_every_nth_item_in_place(monkeypatch):
    items = list("abcde")
    assert shards.share(items) == items  # one process: all of them
    _as_rank(monkeypatch, 1, 2)
    assert shards.share(items) == [None, "b", None, "d", None]
    _as_rank(monkeypatch, 0, 2)
    assert shards.share(items) == ["a", None, "c", None, "e"]


@pytest.mark.slow
def test_two_shares_give_the_rows_of_the_whole_list(apptest_run, monkeypatch):
    run = apptest_run
    methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
    ex = run.explainer(methods)
    texts = faithfulness_sentences(run.texts, 12, seed=0)
    whole = shards.sorted_rows(faithfulness(ex, texts, progress=False).assign(seed=0), list(methods), [0])
    parts = []
    for r in range(2):
        _as_rank(monkeypatch, r, 2)
        parts.append(faithfulness(ex, shards.share(texts), progress=False).assign(seed=0))
    got = shards.sorted_rows(pd.concat(parts, ignore_index=True), list(methods), [0])
    keys = ["method", "target", "text_index", "predicted", "flipped", "n_directions"]
    pd.testing.assert_frame_equal(got[keys], whole[keys])
    np.testing.assert_allclose(got["conf_drop"], whole["conf_drop"], atol=1e-4)
    assert set(parts[0]["text_index"]) == set(range(0, 12, 2)) and set(parts[1]["text_index"]) == set(range(1, 12, 2))
