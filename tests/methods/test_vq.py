"""Tests of the VQ tensor math: farthest-first, EMA codebook, dead codes, straight-through."""

import numpy as np
import pytest
import torch

from vqlc_core.base.distributed import _noop
from vqlc_core.methods.vq import EMACodebook, VQModel, farthest_first, orthogonality_penalty, squared_distances


def _min_dist_to(chosen: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.cdist(x.double(), chosen.double()).pow(2).min(1).values


def test_farthest_first_picks_the_farthest_remaining_point():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [4.0, 3.0], [6.0, -1.0], [2.0, 9.0]])
    picks = farthest_first(x, 6, seed=3)
    for i in range(1, 6):
        farthest_gap = _min_dist_to(picks[:i], x).max()
        assert torch.isclose(_min_dist_to(picks[:i], picks[i : i + 1])[0], farthest_gap)


def test_farthest_first_from_an_end_of_a_line_takes_the_other_end_next():
    x = torch.tensor([[0.0], [1.0], [10.0], [4.0]])
    for seed in range(20):
        picks = farthest_first(x, 2, seed=seed)
        if picks[0, 0] == 0.0:
            assert picks[1, 0] == 10.0
            return
    raise AssertionError("no seed in 0..19 started at 0")


def test_farthest_first_never_picks_a_duplicate_twice():
    base = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    x = base.repeat(10, 1)  # every row ten times
    picks = farthest_first(x, 3, seed=0)
    assert len(torch.unique(picks, dim=0)) == 3
    assert torch.equal(torch.unique(picks, dim=0), torch.unique(base, dim=0))


def test_farthest_first_fills_with_jittered_copies_when_there_are_too_few_unique_rows():
    x = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]]).repeat(4, 1)
    picks = farthest_first(x, 5, seed=0)
    assert picks.shape == (5, 2)
    assert len(torch.unique(picks, dim=0)) == 5
    assert torch.allclose(picks[3:], picks[:2], atol=1e-2)


def test_farthest_first_is_seeded():
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(farthest_first(x, 10, seed=1), farthest_first(x, 10, seed=1))
    assert not torch.equal(farthest_first(x, 10, seed=1), farthest_first(x, 10, seed=2))


def test_codebook_assigns_each_encoding_to_its_nearest_code():
    cb = EMACodebook(5, 3)
    cb.init_(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)))
    z = torch.randn(50, 3, generator=torch.Generator().manual_seed(1))
    q, idx, dists = cb(z)
    assert torch.equal(idx, torch.cdist(z, cb.embed).argmin(1))
    assert torch.allclose(q, cb.embed[idx])
    assert torch.allclose(dists, squared_distances(z, cb.embed))


def test_one_ema_step_equals_the_formula():
    decay, eps = 0.9, 0.1
    cb = EMACodebook(2, 2, decay=decay, eps=eps)
    cb.init_(torch.tensor([[1.0, 1.0], [-1.0, 1.0]]), count=1.0)
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    cb.ema_update_(z, torch.tensor([0, 0, 1]))
    # counts (2, 1), sums ((4, 0), (0, 2)); EMA: old * 0.9 + new * 0.1
    size = torch.tensor([0.9 * 1 + 0.1 * 2, 0.9 * 1 + 0.1 * 1])  # (1.1, 1.0)
    avg = torch.tensor([[0.9 * 1 + 0.1 * 4, 0.9 * 1 + 0.0], [0.9 * -1 + 0.0, 0.9 * 1 + 0.1 * 2]])
    n = size.sum()
    smoothed = (size + eps) / (n + 2 * eps) * n
    assert torch.allclose(cb.cluster_size, size)
    assert torch.allclose(cb.embed_avg, avg)
    assert torch.allclose(cb.embed, avg / smoothed[:, None])


def test_dead_codes_are_reseeded_with_the_largest_error_encodings_in_order():
    cb = EMACodebook(4, 2, dead_threshold=0.5)
    cb.init_(torch.tensor([[0.0, 0.0], [100.0, 100.0], [1.0, 0.0], [-100.0, 100.0]]))
    cb.cluster_size.copy_(torch.tensor([1.0, 0.1, 1.0, 0.2]))  # codes 1 and 3 are dead
    z = torch.tensor([[0.1, 0.0], [0.0, 7.0], [1.0, 3.0], [0.0, -5.0], [0.9, 0.0]])
    _, _, dists = cb(z)
    assert cb.replace_dead_codes_(z, dists) == 2
    assert torch.equal(cb.embed[1], z[1])  # largest error: 7 from code 0
    assert torch.equal(cb.embed[3], z[3])  # next largest: 5 from code 0
    assert torch.equal(cb.embed[[0, 2]], torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
    share = (1.0 + 0.1 + 1.0 + 0.2) / 4  # the uniform share of the counts before the re-seeding
    assert torch.allclose(cb.cluster_size[[1, 3]], torch.tensor([share, share]))
    assert torch.allclose(cb.embed_avg[[1, 3]], z[[1, 3]] * share)


def test_a_reseeded_code_survives_a_batch_in_which_it_gets_no_rows():
    cb = EMACodebook(4, 2, decay=0.9, dead_threshold=0.5)
    cb.init_(torch.tensor([[0.0, 0.0], [100.0, 100.0], [1.0, 0.0], [0.0, 1.0]]), count=1.0)
    cb.cluster_size[1] = 0.1  # code 1 is dead
    z = torch.tensor([[0.1, 0.0], [0.0, 9.0], [0.9, 0.0]])
    assert cb.replace_dead_codes_(z, cb(z)[2]) == 1
    reseeded = cb.embed[1].clone()
    assert torch.equal(reseeded, z[1])
    empty = torch.tensor([[0.0, 0.1], [1.0, 0.1]])  # no row goes to the re-seeded code
    _, idx, dists = cb(empty)
    assert not (idx == 1).any()
    cb.ema_update_(empty, idx)
    assert cb.replace_dead_codes_(empty, dists) == 0
    assert cb.cluster_size[1] >= cb.dead_threshold
    assert torch.allclose(cb.embed[1], reseeded, rtol=1e-4)


def test_no_code_is_replaced_when_none_is_dead():
    cb = EMACodebook(3, 2, dead_threshold=0.5)
    cb.init_(torch.eye(3, 2))
    before = cb.embed.clone()
    z = torch.randn(4, 2)
    assert cb.replace_dead_codes_(z, cb(z)[2]) == 0
    assert torch.equal(cb.embed, before)


def test_the_straight_through_gradient_reaches_the_encoder():
    torch.manual_seed(0)
    model = VQModel(6, n_codes=4, hidden=8)
    h = torch.randn(16, 6)
    model.codebook.init_(model.encoder(h).detach()[:4])
    model(h).rec.backward()
    assert model.encoder.proj.weight.grad.abs().sum() > 0
    assert model.encoder.fc1.weight.grad.abs().sum() > 0
    assert model.codebook.embed.grad is None


def test_the_orthogonality_penalty_is_the_mean_squared_deviation_of_squared_singular_values():
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen))
    assert orthogonality_penalty(q) < 1e-10
    assert orthogonality_penalty(q[:, :4]) < 1e-10 and orthogonality_penalty(q[:4]) < 1e-10  # either side
    for w in (torch.randn(6, 6, generator=gen), torch.randn(6, 3, generator=gen), torch.randn(3, 6, generator=gen)):
        sv = torch.linalg.svdvals(w)
        assert torch.isclose(orthogonality_penalty(w), (sv**2 - 1).pow(2).mean(), rtol=1e-4)


def test_the_loss_adds_the_weighted_penalty_on_the_encoder_projection_only_when_weighted():
    h = torch.randn(16, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    off = VQModel(6, n_codes=4, hidden=8)
    torch.manual_seed(0)
    on = VQModel(6, n_codes=4, hidden=8, ortho_weight=2.0)
    with torch.no_grad():
        for model in (off, on):
            model.encoder.proj.weight.mul_(1.5)
            model.codebook.init_(model.encoder(h)[:4])
    a, b = off(h), on(h)
    assert a.ortho == 0 and torch.equal(a.loss, a.rec + 0.25 * a.commit)
    expected = orthogonality_penalty(on.encoder.proj.weight)
    assert torch.isclose(b.ortho, expected) and torch.isclose(b.loss, a.loss + 2.0 * expected)
    b.ortho.backward()
    assert on.encoder.proj.weight.grad.abs().sum() > 0 and on.decoder.proj.weight.grad is None


def test_encoder_starts_as_the_identity_with_a_small_gate():
    model = VQModel(5, n_codes=3, hidden=4)
    h = torch.randn(7, 5)
    assert model.encoder.gate.item() < 0.01
    assert torch.allclose(model.encoder(h), h, atol=0.05)


def test_the_codebook_state_lives_in_buffers_that_state_dict_saves():
    state = VQModel(4, n_codes=3, hidden=4).state_dict()
    for key in ("embed", "embed_avg", "cluster_size", "initted"):
        assert f"codebook.{key}" in state
    assert "norm_mean" in state and "norm_scale" in state


def test_the_normalization_starts_as_the_identity_and_denormalize_undoes_it():
    model = VQModel(3, n_codes=2, hidden=4)
    x = torch.tensor([[1.0, -2.0, 300.0], [0.5, 4.0, -100.0]])
    assert torch.equal(model.normalize(x), x)
    mean, scale = torch.tensor([1.0, 0.0, 100.0]), torch.tensor([2.0, 1.0, 50.0])
    model.set_normalization_(mean, scale)
    assert torch.equal(model.normalize(x), (x - mean) / scale)
    assert torch.allclose(model.denormalize(model.normalize(x)), x)


def test_a_fresh_model_loaded_from_a_state_dict_normalizes_alike():
    model = VQModel(3, n_codes=2, hidden=4)
    model.set_normalization_(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0]))
    fresh = VQModel(3, n_codes=2, hidden=4)
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(fresh.normalize(x), model.normalize(x))


def test_a_single_process_reduces_with_a_noop():
    cb = EMACodebook(3, 2)
    assert cb.all_reduce_fn is _noop and cb.broadcast_fn is _noop
    assert cb.all_gather_fn(torch.ones(2))[0].tolist() == [1.0, 1.0]


def _dense_centre_and_shell(n_centre: int = 2000, n_shell: int = 200, d: int = 8, seed: int = 0) -> torch.Tensor:
    """A dense blob at the origin (most rows) inside a sparse shell of radius 10."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(n_centre, d, generator=g) * 0.5
    shell = torch.randn(n_shell, d, generator=g)
    shell = 10 * shell / shell.norm(dim=1, keepdim=True)
    return torch.cat([centre, shell])


def test_farthest_first_leaves_a_dense_centre_without_codes_and_kmeans_plus_plus_seeds_it():
    from vqlc_core.methods.vq import init_codes

    x = _dense_centre_and_shell()  # 91% of the rows in the centre
    in_centre = {how: int((init_codes(x, 40, how, seed=0).norm(dim=1) < 3).sum()) for how in ("farthest_first", "kmeans++")}
    assert in_centre["farthest_first"] <= 1  # at most its random first pick; every other pick is on the shell
    assert in_centre["kmeans++"] >= 5
    assert torch.equal(init_codes(x, 40, "kmeans++", seed=3), init_codes(x, 40, "kmeans++", seed=3))
    with pytest.raises(ValueError, match="init must be one of"):
        init_codes(x, 4, "random")


def test_random_reseeding_takes_seeded_batch_rows_where_largest_error_takes_the_periphery():
    from vqlc_core.methods.vq import EMACodebook

    z = _dense_centre_and_shell(n_centre=900, n_shell=100)
    picked = {}
    for how in ("largest_error", "random"):
        cb = EMACodebook(10, z.shape[1], dead_threshold=0.5, reseed=how, seed=0)
        cb.init_(torch.zeros(10, z.shape[1]))
        cb.cluster_size[:8] = 0.0  # eight dead codes
        _, _, dists = cb(z)
        assert cb.replace_dead_codes_(z, dists) == 8
        picked[how] = cb.embed[:8].clone()
        assert all(any(torch.equal(c, row) for row in z) for c in picked[how])  # every new code is a batch row
    assert (picked["largest_error"].norm(dim=1) > 9).all()  # all from the shell
    assert (picked["random"].norm(dim=1) < 3).sum() >= 4  # mostly from the dense centre, as the rows are
    again = EMACodebook(10, z.shape[1], dead_threshold=0.5, reseed="random", seed=0)
    again.init_(torch.zeros(10, z.shape[1]))
    again.cluster_size[:8] = 0.0
    again.replace_dead_codes_(z, again(z)[2])
    assert torch.equal(again.embed[:8], picked["random"])


def test_row_normalisation_gives_every_row_norm_sqrt_d_and_denormalize_undoes_it():
    model = VQModel(6, n_codes=4, row_norm=True)
    model.set_normalization_(np.full(6, 0.5, np.float32), np.full(6, 2.0, np.float32))
    x = torch.randn(5, 6) * torch.tensor([[0.1], [1.0], [3.0], [10.0], [0.5]])
    h = model.normalize(x)
    assert torch.allclose(h.norm(dim=1), torch.full((5,), 6 ** 0.5), atol=1e-5)
    assert torch.allclose(model.denormalize(h, x), x, atol=1e-5)
    with pytest.raises(ValueError, match="needs the raw rows"):
        model.denormalize(h)


def test_a_kmeans_start_seeds_the_dense_centre_and_lowers_the_error_of_kmeans_plus_plus_seeds():
    """The default start: a short k-means of the rows. Its codes seed the dense centre that holds
    91% of the rows (farthest-first leaves it without), and their quantisation error is below
    that of the k-means++ seeds it starts from."""
    from vqlc_core.methods.vq import init_codes

    x = _dense_centre_and_shell()
    codes = {how: init_codes(x, 40, how, seed=0) for how in ("kmeans++", "kmeans")}
    error = {how: float(squared_distances(x, c).min(1).values.mean()) for how, c in codes.items()}
    assert int((codes["kmeans"].norm(dim=1) < 3).sum()) >= 5
    assert error["kmeans"] < error["kmeans++"]
    assert torch.equal(init_codes(x, 40, "kmeans", seed=3), init_codes(x, 40, "kmeans", seed=3))
