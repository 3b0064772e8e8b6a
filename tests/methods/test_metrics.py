"""Tests of the fit measures: R², centroid R², codebook perplexity and use, dead codes, assignment AMI."""

import numpy as np
import pytest
import torch

from vqlc_core.methods.metrics import (R2Accumulator, assignment_ami, centroid_r2, codebook_perplexity, codebook_use,
                               dead_codes, r2_score)


def test_a_perfect_reconstruction_has_r2_one_and_the_mean_has_r2_zero():
    x = np.random.default_rng(0).normal(size=(50, 4))
    assert r2_score(x, x) == pytest.approx(1.0)
    assert r2_score(x, np.broadcast_to(x.mean(0), x.shape)) == pytest.approx(0.0, abs=1e-12)


def test_r2_pools_the_error_over_all_dimensions():
    x = np.array([[0.0, 0.0], [2.0, 4.0]])  # SST = 2 + 8 = 10
    recon = np.array([[1.0, 0.0], [2.0, 4.0]])  # SSE = 1
    assert r2_score(x, recon) == pytest.approx(0.9)


def test_the_streamed_r2_equals_the_one_shot_r2():
    rng = np.random.default_rng(1)
    x, recon = rng.normal(size=(100, 6)) + 3.0, rng.normal(size=(100, 6))
    acc = R2Accumulator()
    for s in range(0, 100, 17):
        acc.update(torch.from_numpy(x[s : s + 17]), recon[s : s + 17])
    assert acc.value() == pytest.approx(r2_score(x, recon), rel=1e-10)


def test_uniform_usage_has_perplexity_k_and_one_code_has_perplexity_one():
    assert codebook_perplexity(np.arange(8).repeat(3), 8) == pytest.approx(8.0)
    assert codebook_perplexity(np.zeros(10, dtype=int), 8) == pytest.approx(1.0)


def test_dead_codes_counts_the_codes_that_no_row_uses():
    assert dead_codes(np.array([0, 0, 2, 5]), 6) == 3


def test_code_indices_outside_the_codebook_are_refused():
    with pytest.raises(ValueError, match="Code indices"):
        codebook_perplexity(np.array([0, 9]), 4)


def test_ami_is_one_for_the_same_partition_under_other_labels():
    a = np.array([0, 0, 1, 1, 2, 2])
    assert assignment_ami(a, np.array([5, 5, 3, 3, 9, 9])) == pytest.approx(1.0)
    assert assignment_ami(a, np.array([0, 1, 0, 1, 0, 1])) < 0.1



def test_centroid_r2_streams_the_reconstruction_of_rows_by_their_concept_vector():
    from vqlc_core.data.store import ArrayStore

    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    a = rng.integers(4, size=40)
    vectors = np.stack([x[a == k].mean(0) for k in range(4)])
    rows = np.arange(3, 40, 2)
    got = centroid_r2(ArrayStore(x, chunk_rows=7), rows, a, vectors)
    assert got == pytest.approx(r2_score(x[rows], vectors[a[rows]]), rel=1e-6)
    assert centroid_r2(ArrayStore(x), None, np.arange(40) % 40, x) == pytest.approx(1.0)  # each row its own concept
    assert 0 < centroid_r2(ArrayStore(x), None, a, vectors) < 0.5  # four centroids of noise explain little


def test_codebook_use_counts_used_and_dead_codes():
    use = codebook_use(np.array([0, 0, 2, 5]), 6)
    assert (use["used_codes"], use["dead_codes"]) == (3, 3)
    assert use["perplexity"] == pytest.approx(codebook_perplexity(np.array([0, 0, 2, 5]), 6))
