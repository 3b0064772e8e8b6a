"""The instruments that tell a concept from an energy cut (vqlc_core/evaluate/instrument.py), on
the real apptest run: α = 1 at every position is the faithfulness table's ablation, α = 0
changes nothing, a cut at the pooled position of a mean-pooled model is not made, and an empty
rationale's comprehensiveness is exactly 0."""

import numpy as np
import pytest
import torch

from vqlc_core.evaluate import instrument as ins
from vqlc_core.evaluate.evaluation import faithfulness_sentences, train_covariance
from vqlc_core.evaluate.faithfulness import MATCHED, PREDICTION, faithfulness


@pytest.fixture(scope="module")
def setup(apptest_run):
    run = apptest_run
    seed = run.cfg.method_seeds[0]
    ex = run.explainer({m: (run.method(m, seed), run.concept_set(m, seed)) for m in run.methods_built()})
    texts = faithfulness_sentences(run.texts, 6, run.cfg.seed)
    cov = train_covariance(run.store, seed=run.cfg.seed)
    probe = ins.fit_probe(run.store)
    rows = ins.instrument(ex, texts, probe, seed=seed, cov=cov, alphas=(0.0, 0.5, 1.0), batch_size=4, progress=False)
    return ex, texts, cov, seed, rows


def test_alpha_one_at_every_position_is_the_faithfulness_ablation(setup):
    ex, texts, cov, seed, rows = setup
    f = faithfulness(ex, texts, seed=seed, cov=cov, progress=False, batch_size=4)
    a = rows[(rows["measure"] == ins.DOSE) & (rows["position"] == ins.EVERY) & (rows["alpha"] == 1.0)]
    m = a.merge(f, on=["method", "target", "text_index"])
    assert len(m) == len(a) == len(ex.methods) * len(texts) * (1 + len(MATCHED[PREDICTION]))
    assert np.allclose(m["conf_drop_x"], m["conf_drop_y"], atol=1e-6)
    assert np.allclose(m["energy_x"], m["energy_y"], atol=1e-6)


def test_alpha_zero_changes_nothing_and_energy_grows_as_two_alpha_minus_alpha_squared(setup):
    rows = setup[-1]
    dose = rows[rows["measure"] == ins.DOSE]
    zero = dose[dose["alpha"] == 0.0]
    assert np.abs(zero["conf_drop"]).max() < 1e-5 and np.abs(zero["energy"]).max() < 1e-9
    half = dose[dose["alpha"] == 0.5].set_index(["method", "target", "text_index"])["energy"]
    full = dose[dose["alpha"] == 1.0].set_index(["method", "target", "text_index"])["energy"]
    assert np.allclose(half, 0.75 * full.reindex(half.index), atol=1e-6)  # 2α − α² at α = ½
    assert (rows["position"] != ins.POOLED).all()  # MiniLM pools the mean: no pooled-only cut


def test_the_scaled_cut_by_hand():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 3, 5, generator=g)
    q = torch.nn.functional.normalize(torch.randn(2, 1, 5, generator=g), dim=-1)
    where = torch.tensor([[False, True, False], [True, False, False]])
    got = ins.scaled_cut(h, q, 0.25, where)
    for b in range(2):
        for t in range(3):
            want = h[b, t] - (0.25 * (h[b, t] @ q[b, 0]) * q[b, 0] if where[b, t] else 0)
            assert torch.allclose(got[b, t], want, atol=1e-6)


def test_eraser_rows_and_an_empty_rationale(setup):
    ex, texts, *_, rows = setup
    er = rows[rows["measure"].isin([ins.COMPREHENSIVENESS, ins.SUFFICIENCY])]
    assert set(er["method"]) == {ins.ATTRIBUTION, *ex.methods}
    sal = er[er["target"] == ins.SALIENT_WORDS].set_index(["measure", "text_index"])["n_words"]
    rnd = er[er["target"] == ins.RANDOM_WORDS[ins.SALIENT_WORDS]].set_index(["measure", "text_index"])["n_words"]
    assert (sal == rnd.reindex(sal.index)).all() and (sal > 0).all()
    enc, words = ex.backbone.tokenize(texts[:1])
    p0 = ins._score(ex, texts[:1])[0]
    assert np.allclose(ins._score(ex, [ins._without(texts[0], words[0], set())])[0], p0)  # comprehensiveness 0
    assert ins._without("a bb c", words=[type("W", (), {"start": 2, "end": 4})()], drop={0}) == "a c"


def test_the_differences_pair_each_target_with_its_controls(setup):
    d = ins.instrument_differences(setup[-1], n_boot=100)
    dose = d[(d["measure"] == ins.DOSE) & (d["alpha"] == 0.0)]
    assert len(dose) and np.allclose(dose["diff_conf_drop"], 0, atol=1e-5)
    assert set(d["control"]) >= set(MATCHED[PREDICTION]) | set(ins.RANDOM_WORDS.values())
    assert (d["diff_conf_drop_low"] <= d["diff_conf_drop"] + 1e-12).all()
    assert (d["diff_conf_drop"] <= d["diff_conf_drop_high"] + 1e-12).all()


def test_the_evaluate_stage_writes_the_instruments_and_their_full_cut_is_the_faithfulness_rows(apptest_run):
    """The evaluate stage measures a seeded sample of the faithfulness sentences with every
    instrument but the pooled-only cut; its α = 1 rows are that stage's own ablation rows, and
    the tables the Compare page shows are read from them."""
    from vqlc_core.base.runio import read_parquet
    from vqlc_core.evaluate.tables import instrument_table

    run = apptest_run
    rows = run.instrument_rows()
    n = min(run.cfg.eval.instrument_texts, run.cfg.eval.faithfulness_texts)
    assert rows["text_index"].nunique() == n and set(rows["seed"]) == set(run.cfg.method_seeds)
    assert set(rows["measure"]) == set(ins.MEASURES) and set(rows["position"]) == {ins.EVERY}
    faith = read_parquet(run.dir / "eval" / "faithfulness_rows.parquet")
    full = rows[(rows["measure"] == ins.DOSE) & (rows["alpha"] == 1.0)]
    m = full.merge(faith, on=["seed", "method", "target", "text_index"])
    assert len(m) == len(full) > 0 and np.allclose(m["conf_drop_x"], m["conf_drop_y"], atol=1e-6)
    d = read_parquet(run.dir / "eval" / "instrument.parquet")
    assert set(d["measure"]) == set(ins.MEASURES)
    table = instrument_table(run)
    assert table.count("\n") == len(d) + 1 and "IG salient words" in table
