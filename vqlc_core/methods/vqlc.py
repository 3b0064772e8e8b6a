"""VQLC, the estimator: trains a `VQModel` on mini-batches streamed from an activation store,
so memory does not grow with the number of rows, and maps raw store vectors to codes. The
normalisation lives in the model's buffers; a checkpoint is written after every epoch
(`checkpoint.py`) and a killed fit resumes where it stopped. Under torchrun every rank trains
the same model on its slice of each global batch (see `_fit`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from vqlc_core.base import distributed
from vqlc_core.base.options import at_least, one_of
from vqlc_core.base.runio import RunError
from vqlc_core.methods.base import softmax_neg_distances
from vqlc_core.methods.options import BETA, DEFAULT_VARIANT, VARIANTS, VQLCOptions
from vqlc_core.methods.registry import N_CONCEPTS
from vqlc_core.methods.trainer import ModuleMethod
from vqlc_core.methods.metrics import R2Accumulator, perplexity_from_counts
from vqlc_core.methods.scaling import NORMALIZE, normalization
from vqlc_core.methods.vq import INITS, RESEEDS, VQModel, init_codes


class VQLC(ModuleMethod):
    """Vector Quantized Latent Concepts: residual encoder, EMA codebook of `n_concepts` codes,
    residual decoder; `predict` returns the index of the closest code in the code book.

    beta: weight of the commitment loss. decay, eps: EMA decay and Laplace smoothing of counts.
    ortho_weight: weight λ of the penalty λ·||PᵀP - I||²_F / d that keeps the encoder's
        projection P near an isometry of the model's space (0, the default, turns it off, as in
        the paper): with k-means++ initialisation and row normalisation it made prediction
        concepts no more faithful and cost 30% more fit time (bench/vqlc_settings.py,
        bench/vqlc_fidelity.py).
    dead_threshold: a code is re-seeded when its EMA count falls below this fraction of its
        share under uniform use (batch_size / n_concepts); it restarts at that share.
    hidden: width of the encoder's and decoder's non-linear branch.
    init_sample: at most this many rows seed the codebook (4,096 for the default 'kmeans' start,
        about 10 a code at K = 400: 2,048 lowered the word concepts' dev R² from 0.3725 to 0.3638).
    init: 'farthest_first' (the paper's traversal over the deduplicated encodings), 'kmeans++'
        (D² sampling, which also seeds dense regions) or 'kmeans' (k-means++ and 10 Lloyd
        iterations on the sample, `vq.kmeans_codes`: a short training then refines the codes).
    reseed: where dead codes restart: 'largest_error' (the paper's rule) or 'random' batch rows.
    normalize: 'center_rms' (subtract the mean, divide by one global RMS; chosen over 'standard'
        by measurement, see `scaling.normalization`), 'center_row' (center_rms, then every row
        rescaled to norm sqrt(d): rows differ by direction only), 'standard' (per-dimension mean
        and std) or 'none';
        statistics come from one streamed pass over the fit rows into the model's buffers, and
        transform / predict apply them, so callers pass raw store rows.
    epochs: passes over the fit rows; None (default) picks enough for `min_steps` optimiser
        steps (and at least one pass), so small fit sets train long enough and large stores take
        one pass.
    min_steps: optimiser steps that `epochs=None` trains at the least (20 by default after a
        k-means start, so the default fit set's word rows train one pass; 1,000 for the 'long' and 'paper' variants).
    stop_tol, check_every: stop once fewer than `stop_tol` of a probe of 2,048 fit rows change
        concept between two checks `check_every` steps apart (0, or `epochs` set: train every step);
        see `trainer`. On the default run's 10,000 fit rows (seed 0) it stopped after 640 of 1,040
        steps, dev R² by concept vector 0.4186 against 0.4209 for all of them.
    checkpoint_dir: when set, a checkpoint is written after every epoch and fit resumes from it.
    The defaults of init, reseed, normalize, ortho_weight and stop_tol are the build's default
    variant's (`options.VARIANTS["default"]`).
    """

    name = "vqlc"
    display_name = "VQLC"
    Options = VQLCOptions
    resumable = ("epochs", "progress", "checkpoint_dir", "device")

    def __init__(self, n_concepts: int = N_CONCEPTS, beta: float = BETA,
                 ortho_weight: float = DEFAULT_VARIANT["ortho_weight"], decay: float = 0.99, eps: float = 1e-5,
                 dead_threshold: float = 0.05, epochs: int | None = None, batch_size: int = 256, lr: float = 1e-3,
                 hidden: int = 256, init_sample: int = DEFAULT_VARIANT["init_sample"],
                 normalize: str = DEFAULT_VARIANT["normalize"], seed: int = 0, checkpoint_dir: str | None = None,
                 device: str = "cpu", progress: bool = True, min_steps: int = DEFAULT_VARIANT["min_steps"],
                 init: str = DEFAULT_VARIANT["init"], reseed: str = DEFAULT_VARIANT["reseed"],
                 stop_tol: float = DEFAULT_VARIANT["stop_tol"], check_every: int = 40):
        self.n_concepts, self.init, self.reseed, self.normalize = n_concepts, init, reseed, normalize
        self.beta, self.ortho_weight, self.decay, self.eps = beta, ortho_weight, decay, eps
        self.dead_threshold, self.hidden, self.init_sample = dead_threshold, hidden, init_sample
        self.epochs, self.batch_size, self.lr, self.min_steps = epochs, batch_size, lr, min_steps
        self.stop_tol, self.check_every = stop_tol, check_every
        self.seed, self.checkpoint_dir, self.device, self.progress = seed, checkpoint_dir, device, progress

    # ---- construction and parameters ----------------------------------------------------

    @classmethod
    def from_config(cls, mcfg, seed: int, workdir: Path) -> "VQLC":
        """VQLC with the build's K, beta and epochs; it checkpoints into `workdir/checkpoint` and,
        under torchrun, trains on this rank's device."""
        o = mcfg.options_of("vqlc")
        return cls(n_concepts=mcfg.n_concepts, beta=o["beta"], epochs=o["epochs"], seed=seed,
                   **VARIANTS[o["variant"]], checkpoint_dir=str(Path(workdir) / "checkpoint"))  # device: the build's

    @classmethod
    def fit_rows(cls, mcfg, store, fitset: np.ndarray) -> np.ndarray:
        """Every train row when `vqlc_fit_on` is 'all', else the shared fit set."""
        return store.rows_where(split="train") if mcfg.options_of("vqlc")["fit_on"] == "all" else fitset

    def _validate(self) -> None:
        for key, allowed in (("normalize", NORMALIZE), ("init", INITS), ("reseed", RESEEDS)):
            one_of(self, key, allowed)
        at_least(self, "ortho_weight", 0)
        at_least(self, "stop_tol", 0)
        if not 0.0 <= self.decay < 1.0:
            raise RunError(f"decay must lie in [0, 1), got {self.decay}.")
        for key in ("n_concepts", "min_steps", "batch_size", "hidden", "init_sample", "check_every"):
            at_least(self, key, 1)

    # ---- building blocks --------------------------------------------------------------

    def _build(self, dim: int) -> VQModel:
        threshold = self.dead_threshold * self.batch_size / self.n_concepts
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return VQModel(dim, self.n_concepts, hidden=self.hidden, beta=self.beta, decay=self.decay,
                           eps=self.eps, dead_threshold=threshold, ortho_weight=self.ortho_weight,
                           row_norm=self.normalize == "center_row", reseed=self.reseed,
                           seed=self.seed).to(self.device)

    def _set_normalization(self, store, rows: np.ndarray) -> None:
        """Mean and scale from one streamed pass over the fit rows, into the model's buffers."""
        if self.normalize == "none":
            return  # the buffers start as the identity
        batches = store.iter_batches(max(self.batch_size, 8192), shuffle=False, rows=rows)
        mean, var = distributed.moments(batches, store.dim, distributed.collectives().all_reduce, self.device)
        how = "center_rms" if self.normalize == "center_row" else self.normalize  # the row scale is the model's
        self.model_.set_normalization_(*normalization(mean, var, how))

    def _init_codebook(self, store, rows: np.ndarray) -> None:
        """Codes from a seeded sample (`init`), computed on rank 0 and broadcast by `init_`."""
        cb = self.model_.codebook
        codes = torch.zeros_like(cb.embed)  # (K, dz)
        if distributed.is_main():
            pick = np.random.default_rng(self.seed).choice(rows, size=min(self.init_sample, len(rows)), replace=False)
            sample = torch.from_numpy(store.read(np.sort(pick))).to(self.device)
            with torch.no_grad():
                z = self.model_.encoder(self.model_.normalize(sample))  # (k, dz)
            codes = init_codes(z, self.n_concepts, self.init, self.seed)
        cb.init_(codes, count=self.batch_size / self.n_concepts)

    @torch.no_grad()
    def _run(self, X: torch.Tensor, chunk: int = 8192):
        """Per chunk of raw X: (z, code index, reconstruction in raw space, normalised input,
        reconstruction in normalised space)."""
        self.model_.eval()
        for s in range(0, len(X), chunk):
            h = self.model_.normalize(X[s : s + chunk].to(self.device))
            out = self.model_(h)
            yield out.z, out.indices, self.model_.denormalize(out.recon, X[s : s + chunk].to(self.device)), h, out.recon

    # ---- fit --------------------------------------------------------------------------

    def _optimizer(self) -> torch.optim.Optimizer:
        """Adam; under torchrun every rank starts from rank 0's model."""
        opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr, foreach=True)
        for t in self.model_.state_dict().values():  # one model on every rank from the start
            distributed.collectives().broadcast(t)
        return opt

    def _begin(self, store, rows: np.ndarray) -> None:
        self._set_normalization(store, rows)
        self._init_codebook(store, rows)

    def _epoch(self, store, rows: np.ndarray, opt: torch.optim.Optimizer, epoch: int, bar) -> dict:
        """One pass over the fit rows. Under torchrun every rank reads the same shuffled stream of
        global batches of `batch_size` rows and trains on its contiguous slice of each; gradients
        and the codebook's EMA sums and counts are summed over the ranks, so all ranks hold one
        model, equal (up to float summation order) to the model one process trains."""
        model, cb, n = self.model_, self.model_.codebook, len(rows)
        all_reduce = distributed.collectives().all_reduce
        reduce_grads_ = distributed.all_reduce_grads_ if distributed.world() > 1 else lambda *_: None  # chosen once
        params = list(model.parameters())
        sums = {"loss": 0.0, "rec": 0.0, "commit": 0.0, "ortho": 0.0}
        counts = torch.zeros(self.n_concepts, dtype=torch.long)
        replaced, first = 0, epoch * math.ceil(n / self.batch_size)  # the global step before this epoch
        converged = False
        for i, batch in enumerate(store.iter_batches(self.batch_size, shuffle=True, seed=self.seed + epoch, rows=rows)):
            x = distributed.local_slice(batch)  # (B_r, d), this rank's part of the global batch
            out = model(model.normalize(x.to(self.device)))
            opt.zero_grad(set_to_none=True)
            # Weighted by the slice's share, the summed gradients are those of the global mean.
            (out.loss * (len(x) / len(batch)) if len(x) else out.z.sum()).backward()
            reduce_grads_(params, all_reduce)
            opt.step()
            cb.ema_update_(out.z, out.indices)
            replaced += cb.replace_dead_codes_(out.z, out.dists)
            for key in sums:
                sums[key] += float(getattr(out, key).detach()) * len(x) if len(x) else 0.0
            counts += torch.bincount(out.indices.cpu(), minlength=self.n_concepts)
            bar.update(1)
            if bar.n % 10 == 0:
                bar.set_postfix(loss=f"{float(out.loss.detach()):.4f}", ppl=f"{perplexity_from_counts(cb.cluster_size.cpu()):.0f}",
                                dead=int((cb.cluster_size < cb.dead_threshold).sum()), refresh=False)
            if self._after_step(first + i + 1):
                converged = True
                break
        totals = torch.tensor(list(sums.values()), dtype=torch.float64, device=self.device)
        counts = counts.to(self.device)
        all_reduce(totals)
        all_reduce(counts)
        sums, counts = dict(zip(sums, totals.tolist())), counts.cpu()
        seen = int(counts.sum()) or 1
        return {**{k: v / seen for k, v in sums.items()}, "perplexity": perplexity_from_counts(counts),
                "dead_codes": int((counts == 0).sum()), "replaced": replaced, "steps": i + 1,
                **({"changed": self.changes_[-1][1]} if self.changes_ else {}),
                **({"converged": True} if converged else {})}

    # ---- predict ----------------------------------------------------------------------

    @property
    def mean_(self) -> np.ndarray:
        """The normalisation's mean (d,), a copy of the model's buffer `norm_mean`."""
        self.check_fitted("model_")
        return self.model_.norm_mean.cpu().numpy().copy()

    @property
    def scale_(self) -> np.ndarray:
        """The normalisation's scale (d,), a copy of the model's buffer `norm_scale`."""
        self.check_fitted("model_")
        return self.model_.norm_scale.cpu().numpy().copy()

    @property
    def codebook_(self) -> np.ndarray:
        """The code book (K, dz) in encoding space."""
        self.check_fitted("model_")
        return self.model_.codebook.embed.detach().cpu().numpy().copy()

    def transform(self, X) -> np.ndarray:
        """Encodings z (N, dz) float32 of raw vectors X (N, d)."""
        parts = [z.cpu().numpy() for z, *_ in self._run(self.fitted_tensor(X))]
        return np.concatenate(parts or [np.zeros((0, self.model_.codebook.dim), np.float32)])

    def predict(self, X) -> np.ndarray:
        """Index (int64) of the closest code in the code book for every raw vector of X (N, d)."""
        parts = [i.cpu().numpy() for _, i, *_ in self._run(self.fitted_tensor(X))]
        return np.concatenate(parts or [np.zeros(0, np.int64)]).astype(np.int64)

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) softmax of negative squared distances from the encodings of X to the codes, at
        each row's own temperature (see `softmax_neg_distances`)."""
        return softmax_neg_distances(self.transform(X), self.codebook_)

    def reconstruct(self, X) -> np.ndarray:
        """Reconstruction of raw vectors X (N, d) through encoder, nearest code and decoder."""
        parts = [r.cpu().numpy() for _, _, r, *_ in self._run(self.fitted_tensor(X))]
        return np.concatenate(parts or [np.zeros((0, self.n_features_in_), np.float32)])

    def predict_store(self, store, batch_size: int = 8192, return_means: bool = False):
        """Code index of every store row, in row order, streamed.

        The same pass computes v_k, the mean encoding of the rows assigned to each code (the code
        itself for a code with no rows), kept as `encoding_means_` (K, dz); with
        return_means=True the result is (indices, v_k).
        """
        self.check_fitted("model_")
        parts = []
        sums = torch.zeros(self.n_concepts, self.model_.codebook.dim, dtype=torch.float64)
        for x in store.iter_batches(batch_size, shuffle=False):
            for z, idx, *_ in self._run(self.fitted_tensor(x), chunk=batch_size):
                sums.index_add_(0, idx.cpu(), z.cpu().double())
                parts.append(idx.cpu().numpy())
        indices = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        counts = np.bincount(indices, minlength=self.n_concepts)
        means = (sums / torch.as_tensor(np.maximum(counts, 1), dtype=torch.float64)[:, None]).float().numpy()
        means[counts == 0] = self.codebook_[counts == 0]
        self.encoding_means_ = means
        return (indices, means) if return_means else indices

    def score_store(self, store, rows: np.ndarray | None = None, batch_size: int = 8192) -> dict:
        """Streamed measures over store rows: R² in the raw hidden space (`r2`) and in the
        normalised space the model trains in (`r2_normalized`), code perplexity, dead codes."""
        self.check_fitted("model_")
        raw, normed = R2Accumulator(), R2Accumulator()
        counts = np.zeros(self.n_concepts, dtype=np.int64)
        for x in store.iter_batches(batch_size, shuffle=False, rows=rows):
            for _, idx, recon, h, recon_n in self._run(self.fitted_tensor(x), chunk=batch_size):
                raw.update(x, recon)
                normed.update(h, recon_n)
                counts += np.bincount(idx.cpu().numpy(), minlength=self.n_concepts)
        return {"r2": raw.value(), "r2_normalized": normed.value(), "perplexity": perplexity_from_counts(counts),
                "dead_codes": int((counts == 0).sum())}

    def concept_centres(self, store, rows: np.ndarray, batch_size: int = 8192) -> np.ndarray:
        """(K, d) each code mapped to the model's space: the decoder's output for the code,
        denormalised; with row normalisation at the mean row scale of the code's members among
        `rows` (a code without members there takes the mean row scale of all of them)."""
        self.check_fitted("model_")
        model = self.model_
        scale_sum, counts = np.zeros(self.n_concepts), np.zeros(self.n_concepts)
        if model.row_norm:
            for x in store.iter_batches(batch_size, shuffle=False, rows=rows):
                with torch.no_grad():
                    r = model.row_scale(x.to(self.device))[:, 0].double().cpu().numpy()
                idx = self.predict(x)
                np.add.at(scale_sum, idx, r)
                np.add.at(counts, idx, 1)
        with torch.no_grad():
            h = model.decoder(model.codebook.embed)  # (K, d) in the normalised space
            r = np.where(counts > 0, scale_sum / np.maximum(counts, 1), scale_sum.sum() / max(counts.sum(), 1))
            r = torch.as_tensor(r if model.row_norm else np.ones(self.n_concepts), dtype=h.dtype, device=h.device)
            return (h * r[:, None] * model.norm_scale + model.norm_mean).cpu().numpy().astype(np.float32)

    def concept_extra(self) -> dict[str, np.ndarray]:
        """VQLC's arrays for the concept set: the codes and, after predict_store, the mean encodings."""
        extra = {"codes": self.codebook_}
        if getattr(self, "encoding_means_", None) is not None:
            extra["encodings"] = self.encoding_means_
        return extra
