"""The tensor math of VQLC: residual encoder, EMA codebook, residual decoder and the model
that joins them. Codebook state and the input normalisation live in buffers, so `state_dict`
carries all of it; the estimator that trains these modules from a store is in `vqlc.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vqlc_core.base.distributed import collectives, rank as distributed_rank
from vqlc_core.base.runio import RunError

INITS = ("farthest_first", "kmeans++", "kmeans")
KMEANS_INIT_ITERS = 10  # Lloyd iterations of the "kmeans" initialisation after its k-means++ seeding
RESEEDS = ("largest_error", "random")


def squared_distances(z: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between rows of z (B, dz) and codes (K, dz): (B, K)."""
    d = z.pow(2).sum(1, keepdim=True) - 2.0 * z @ codes.t() + codes.pow(2).sum(1)[None, :]
    return d.clamp_min_(0.0)


def orthogonality_penalty(weight: torch.Tensor) -> torch.Tensor:
    """||WᵀW - I||²_F / n for a linear map W (d_out, d_in), n = min(d_out, d_in) (the Gram matrix
    of the smaller side): the mean of (σ_i² - 1)² over W's singular values, 0 for an isometry.

    Divided by n, its gradient per weight does not grow with the width, so one weight suits
    models of any hidden size, as the mean-squared reconstruction loss does.
    """
    gram = weight.t() @ weight if weight.shape[0] >= weight.shape[1] else weight @ weight.t()  # (n, n)
    eye = torch.eye(len(gram), dtype=gram.dtype, device=gram.device)
    return (gram - eye).pow(2).sum() / len(gram)


def farthest_first(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """Farthest-first traversal: k rows of x (N, d) that cover the space, as a (k, d) tensor.

    Identical rows are counted once (`torch.unique(dim=0)`), so no vector is picked twice.
    The first pick is a unique row chosen with `seed`; each next pick is the row with the
    largest distance to its nearest already-chosen row. If x has fewer than k unique rows,
    the remaining picks are the chosen rows again, in order, plus seeded Gaussian noise of
    1e-4 times the data's RMS, so the result always has k rows and distinct codes.
    """
    if k < 1:
        raise RunError(f"farthest_first needs k >= 1, got {k}.")
    if x.ndim != 2 or len(x) == 0:
        raise RunError(f"farthest_first needs a non-empty (N, d) tensor, got shape {tuple(x.shape)}.")
    gen = torch.Generator().manual_seed(seed)
    u = torch.unique(x.detach().float().cpu(), dim=0)  # (U, d), sorted, so picks do not depend on row order
    u64 = u.double()  # float64 so that ||u||² - 2u·c + ||c||² keeps small distances exact enough
    sq = u64.pow(2).sum(1)  # (U,)
    n_pick = min(k, len(u))
    chosen = torch.empty(n_pick, dtype=torch.long)
    chosen[0] = int(torch.randint(len(u), (1,), generator=gen))
    min_d = torch.full((len(u),), float("inf"), dtype=torch.float64)  # (U,) distance to the nearest chosen row
    for i in range(n_pick):
        if i > 0:
            chosen[i] = int(torch.argmax(min_d))
        c = u64[chosen[i]]
        min_d = torch.minimum(min_d, (sq - 2.0 * (u64 @ c) + sq[chosen[i]]).clamp_min_(0.0))
        min_d[chosen[i]] = 0.0
    out = u[chosen]
    if n_pick < k:
        rms = float(u.pow(2).mean().sqrt()) or 1.0
        reps = out[torch.arange(k - n_pick) % n_pick]
        noise = torch.randn(reps.shape, generator=gen) * (1e-4 * rms)
        out = torch.cat([out, reps + noise])
    return out.to(x.dtype).to(x.device)


def kmeans_plus_plus(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """k-means++ seeding (scikit-learn's `kmeans_plusplus`, greedy D² sampling): k rows of x (N, d)
    drawn with probability proportional to their squared distance to the codes already chosen.

    Unlike farthest-first, which always takes the most remote row and so spends its codes on
    outliers, D² sampling puts codes where the rows are, dense regions included."""
    from sklearn.cluster import kmeans_plusplus

    if x.ndim != 2 or len(x) < k:
        raise RunError(f"kmeans_plus_plus needs at least k = {k} rows, got shape {tuple(x.shape)}.")
    centers, _ = kmeans_plusplus(x.detach().double().cpu().numpy(), k, random_state=seed)
    return torch.as_tensor(centers, dtype=x.dtype, device=x.device)


def kmeans_codes(x: torch.Tensor, k: int, seed: int = 0, max_iter: int = KMEANS_INIT_ITERS) -> torch.Tensor:
    """k codes from a short k-means of the rows of x (N, d), in float32 (scikit-learn's `KMeans`:
    k-means++ seeding, one run, at most `max_iter` Lloyd iterations). The codebook initialisation
    of SoundStream and VQGAN-LC: the codes start where a clustering of a batch puts them, so a
    short training refines them instead of finding them."""
    from sklearn.cluster import KMeans

    if x.ndim != 2 or len(x) < k:
        raise RunError(f"kmeans_codes needs at least k = {k} rows, got shape {tuple(x.shape)}.")
    km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed).fit(x.detach().float().cpu().numpy())
    return torch.as_tensor(km.cluster_centers_, dtype=x.dtype, device=x.device)


def init_codes(x: torch.Tensor, k: int, how: str = "farthest_first", seed: int = 0) -> torch.Tensor:
    """k initial codes from the rows of x (N, d): `farthest_first` (the paper's choice),
    `kmeans++` (D² seeding) or `kmeans` (a short k-means of the rows)."""
    if how not in INITS:
        raise RunError(f"init must be one of {', '.join(INITS)}, got {how!r}.")
    if how == "farthest_first":
        return farthest_first(x, k, seed)
    return kmeans_plus_plus(x, k, seed) if how == "kmeans++" else kmeans_codes(x, k, seed)


class ResidualEncoder(nn.Module):
    """z = P·h + m·LN(W2·σ(W1·h)): an identity-initialised projection plus a gated non-linear
    correction whose gate m = 0.5·sigmoid(alpha) starts small, so z starts close to h."""

    def __init__(self, d_in: int, d_out: int | None = None, hidden: int = 256, alpha_init: float = -4.0):
        super().__init__()
        d_out = d_in if d_out is None else d_out
        self.proj = nn.Linear(d_in, d_out)
        with torch.no_grad():
            self.proj.weight.copy_(torch.eye(d_out, d_in))
            self.proj.bias.zero_()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)
        self.norm = nn.LayerNorm(d_out)
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))

    @property
    def gate(self) -> torch.Tensor:
        return 0.5 * torch.sigmoid(self.alpha)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(h) + self.gate * self.norm(self.fc2(F.gelu(self.fc1(h))))  # (B, d_out)


class ResidualDecoder(ResidualEncoder):
    """The encoder's mirror: h_hat = P'·q + m'·LN(W2'·σ(W1'·q)), from code space back to h."""


class EMACodebook(nn.Module):
    """K codes that follow an exponential moving average of the encodings assigned to them.

    Buffers: `embed` (K, dz) the codes, `embed_avg` (K, dz) the EMA of assigned sums,
    `cluster_size` (K,) the EMA of assignment counts, `initted` whether codes were seeded.
    Codes get no gradient; encodings get the straight-through gradient of their code.
    """

    def __init__(self, n_codes: int, dim: int, decay: float = 0.99, eps: float = 1e-5,
                 dead_threshold: float = 0.1, reseed: str = "largest_error", seed: int = 0):
        super().__init__()
        if reseed not in RESEEDS:
            raise RunError(f"reseed must be one of {', '.join(RESEEDS)}, got {reseed!r}.")
        self.n_codes, self.dim = n_codes, dim
        self.decay, self.eps, self.dead_threshold = decay, eps, dead_threshold
        self.reseed, self.seed = reseed, int(seed)
        self.register_buffer("embed", torch.randn(n_codes, dim))
        self.register_buffer("embed_avg", self.embed.clone())
        self.register_buffer("cluster_size", torch.ones(n_codes))
        self.register_buffer("initted", torch.tensor(False))
        # re-seeding calls so far: with `seed`, the stream of reseed="random", so a resumed fit draws as an uninterrupted one
        self.register_buffer("reseed_calls", torch.zeros((), dtype=torch.long))
        self.all_reduce_fn, self.broadcast_fn, self.all_gather_fn = collectives()  # no-ops in one process

    @torch.no_grad()
    def init_(self, codes: torch.Tensor, count: float = 1.0) -> None:
        """Seed the codes with `codes` (K, dz); every EMA count starts at `count`."""
        if codes.shape != self.embed.shape:
            raise RunError(f"Codebook init expected codes of shape {tuple(self.embed.shape)}, got {tuple(codes.shape)}.")
        self.broadcast_fn(codes)
        self.embed.copy_(codes)
        self.cluster_size.fill_(count)
        self.embed_avg.copy_(codes * count)
        self.initted.fill_(True)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(straight-through quantized (B, dz), nearest code index (B,), squared distances (B, K))."""
        dists = squared_distances(z.detach(), self.embed)  # (B, K)
        idx = dists.argmin(1)  # (B,)
        q = self.embed[idx]  # (B, dz)
        return z + (q - z).detach(), idx, dists

    @torch.no_grad()
    def ema_update_(self, z: torch.Tensor, idx: torch.Tensor) -> None:
        """One EMA step from encodings z (B, dz) assigned to codes idx (B,).

        Sums and counts are all-reduced across ranks before the EMA; the codes are the EMA sums
        divided by Laplace-smoothed EMA counts: (n_k + eps) / (n + K·eps) · n.
        """
        z = z.detach().to(self.embed.dtype)
        counts = torch.zeros(self.n_codes, dtype=z.dtype, device=z.device)
        counts.index_add_(0, idx, torch.ones_like(idx, dtype=z.dtype))  # (K,)
        sums = torch.zeros_like(self.embed).index_add_(0, idx, z)  # (K, dz)
        self.all_reduce_fn(counts)
        self.all_reduce_fn(sums)
        self.cluster_size.lerp_(counts, 1.0 - self.decay)
        self.embed_avg.lerp_(sums, 1.0 - self.decay)
        n = self.cluster_size.sum()
        smoothed = (self.cluster_size + self.eps) / (n + self.n_codes * self.eps) * n  # (K,)
        self.embed.copy_(self.embed_avg / smoothed[:, None])

    def _random_keys(self, n_local: int) -> torch.Tensor:
        """(n_local,) uniform keys of this rank's rows: keys are drawn for the whole global batch
        from (seed, call) and each rank takes its slice's, so ranks together draw what one process
        draws for the whole batch."""
        sizes = torch.cat(self.all_gather_fn(torch.tensor([n_local], device=self.embed.device))).cpu()  # per rank
        offset = int(sizes[: distributed_rank()].sum())
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.reseed_calls))
        return torch.rand(int(sizes.sum()), generator=gen, dtype=torch.float64)[offset : offset + n_local]

    @torch.no_grad()
    def replace_dead_codes_(self, z: torch.Tensor, dists: torch.Tensor) -> int:
        """Re-seed every code whose EMA count is below `dead_threshold`; return how many.

        Dead codes, in index order, take the batch encodings with the largest assignment error
        (distance to their nearest code): the first dead code the largest, the next the next
        largest, ties in batch order (reseed="largest_error", the paper's rule). With
        reseed="random" they take batch encodings drawn at random (seeded): the re-seeded codes
        then land where the rows are, where largest-error rows are always the periphery. A re-seeded code starts at the uniform share of the EMA
        counts (their sum / K, as at `init_`), not at the threshold: at the threshold one batch
        without rows would mark it dead again, while from the share it has about
        log(threshold / share) / log(decay) empty batches to win rows (about 300 at VQLC's
        defaults: threshold 0.05 of the share, decay 0.99).
        The dead set and the share come from the (reduced, identical) EMA counts. Across ranks
        the batch is the global one: each rank offers its own largest-error encodings, all are
        gathered in rank order, and every rank picks the same ones, so every rank makes the same
        change and it equals the change one process makes on the whole batch.
        """
        dead = torch.nonzero(self.cluster_size < self.dead_threshold).squeeze(1)  # (n_dead,), in index order
        self.reseed_calls += 1
        if len(dead) == 0:
            return 0
        n_batch = torch.tensor([len(z)], device=z.device)
        self.all_reduce_fn(n_batch)
        dead = dead[: min(len(dead), int(n_batch))]
        n = len(dead)
        share = self.cluster_size.sum() / self.n_codes
        err = dists.min(1).values if len(z) else z.new_zeros(0)  # (B,)
        if self.reseed == "random":  # random keys: the top n are a uniform draw from the batch
            err = self._random_keys(len(z)).to(device=z.device, dtype=err.dtype)
        top = torch.argsort(err, descending=True, stable=True)[:n]
        offer = torch.full((n, self.dim + 1), float("-inf"), dtype=self.embed.dtype, device=z.device)  # (n, 1 + dz)
        offer[: len(top), 0] = err[top].to(offer.dtype)
        offer[: len(top), 1:] = z.detach()[top].to(offer.dtype)
        offers = torch.cat(self.all_gather_fn(offer))  # (N·n, 1 + dz), rank order
        new = offers[torch.argsort(offers[:, 0], descending=True, stable=True)[:n], 1:]  # (n, dz)
        self.embed[dead] = new
        self.cluster_size[dead] = share
        self.embed_avg[dead] = new * share
        return n


@dataclass
class VQOutput:
    """What one forward pass of `VQModel` returns."""

    recon: torch.Tensor  # (B, d) reconstruction of h
    z: torch.Tensor  # (B, dz) encodings
    quantized: torch.Tensor  # (B, dz) straight-through codes
    indices: torch.Tensor  # (B,) nearest code
    dists: torch.Tensor  # (B, K) squared distances to every code
    loss: torch.Tensor  # rec + beta * commit + ortho_weight * ortho
    rec: torch.Tensor  # MSE(recon, h)
    commit: torch.Tensor  # MSE(z, sg(e))
    ortho: torch.Tensor  # orthogonality penalty of the encoder's projection P


class VQModel(nn.Module):
    """Encoder -> EMA codebook -> decoder;
    loss = MSE(recon, h) + beta·||z - sg(e)||² + ortho_weight·||PᵀP - I||²_F / d.

    The last term keeps the encoder's projection P near an isometry, so distances between codes
    and encodings stay distances of the model's space (see `orthogonality_penalty`); without
    it P stretches a few directions and shrinks the rest during training.

    `forward` works in the normalised space h = (x - norm_mean) / norm_scale; `normalize` and
    `denormalize` map raw vectors x into it and reconstructions back. The buffers `norm_mean` and
    `norm_scale` (d,) start as zeros and ones (the identity) and are set by `set_normalization_`.
    """

    def __init__(self, dim: int, n_codes: int = 400, code_dim: int | None = None, hidden: int = 256,
                 beta: float = 0.25, decay: float = 0.99, eps: float = 1e-5, dead_threshold: float = 0.1,
                 ortho_weight: float = 0.0, row_norm: bool = False, reseed: str = "largest_error", seed: int = 0):
        super().__init__()
        code_dim = dim if code_dim is None else code_dim
        self.beta, self.ortho_weight = beta, ortho_weight
        self.register_buffer("norm_mean", torch.zeros(dim))
        self.register_buffer("norm_scale", torch.ones(dim))
        self.register_buffer("norm_rows", torch.tensor(bool(row_norm)))  # whether rows are rescaled one by one
        self.encoder = ResidualEncoder(dim, code_dim, hidden)
        self.codebook = EMACodebook(n_codes, code_dim, decay, eps, dead_threshold, reseed, seed)
        self.decoder = ResidualDecoder(code_dim, dim, hidden)

    @torch.no_grad()
    def set_normalization_(self, mean, scale) -> None:
        """Store the per-dimension mean and scale (d,) that `normalize` applies."""
        self.norm_mean.copy_(torch.as_tensor(mean, dtype=self.norm_mean.dtype))
        self.norm_scale.copy_(torch.as_tensor(scale, dtype=self.norm_scale.dtype))

    @property
    def row_norm(self) -> bool:
        return bool(self.norm_rows)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "norm_rows", torch.tensor(False))  # models saved before row normalisation
        state_dict.setdefault(prefix + "codebook.reseed_calls", torch.zeros((), dtype=torch.long))  # and re-seeding
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def row_scale(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1) the factor `normalize` divides each row by after (x - mean) / scale: its RMS
        over the d dimensions with row_norm (so every row gets norm sqrt(d)), else 1."""
        if not self.row_norm:
            return x.new_ones(len(x), 1)
        c = (x - self.norm_mean) / self.norm_scale
        return c.pow(2).mean(1, keepdim=True).sqrt().clamp_min(1e-8)  # (B, 1)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Raw vectors x (B, d) into the space the model trains in: (x - mean) / scale, and with
        row_norm divided by the row's own RMS, so that rows differ by direction only."""
        return (x - self.norm_mean) / self.norm_scale / self.row_scale(x)  # (B, d)

    def denormalize(self, h: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised vectors h (B, d) back into the raw space: h · row scale · scale + mean, the
        row scale of the raw rows x (B, d) that h stands for (needed with row_norm only)."""
        if self.row_norm:
            if x is None:
                raise RunError("denormalize needs the raw rows x when rows are normalised one by one.")
            h = h * self.row_scale(x)
        return h * self.norm_scale + self.norm_mean  # (B, d)

    def forward(self, h: torch.Tensor) -> VQOutput:
        """One pass over normalised vectors h (B, d); see `normalize` for raw ones."""
        z = self.encoder(h)  # (B, dz)
        quantized, idx, dists = self.codebook(z)
        recon = self.decoder(quantized)  # (B, d)
        rec = F.mse_loss(recon, h)
        commit = F.mse_loss(z, quantized.detach())
        loss = rec + self.beta * commit
        if self.ortho_weight:  # the penalty costs two (d, d) matmuls a step; skipped when off
            ortho = orthogonality_penalty(self.encoder.proj.weight)
            loss = loss + self.ortho_weight * ortho
        else:
            ortho = torch.zeros((), device=h.device)
        return VQOutput(recon, z, quantized, idx, dists, loss, rec, commit, ortho)
