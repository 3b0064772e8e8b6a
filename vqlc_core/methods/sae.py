"""A TopK sparse autoencoder as a concept method (Gao et al. 2024, through EleutherAI's
`sparsify`): every row is encoded by its k most active of `n_concepts` latents and decoded as
their weighted sum of unit decoder rows. A token's concept is its most active latent, and that
latent's decoder row is the concept's direction, which ablation projects out.

Training streams mini-batches from the store like VQLC, so memory stays flat; a checkpoint is
written after every epoch (`checkpoint.py`) and a killed fit resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vqlc_core.base import distributed
from vqlc_core.methods.options import LATENTS, K, SAEOptions
from vqlc_core.methods.trainer import ModuleMethod
from vqlc_core.methods.metrics import R2Accumulator, perplexity_from_counts
from vqlc_core.base.runio import RunError
from vqlc_core.methods.scaling import normalization

# Parameters that may change between a killed fit and its resume without changing the result.
_CHUNK = 4096  # rows per encoding chunk: the dense pre-activations are (chunk, n_concepts) floats


def _sparsify():
    """sparsify's SparseCoder and its config; the import prints which decoder it uses, so it is
    kept off stdout (the command line prints tables there)."""
    with contextlib.redirect_stdout(io.StringIO()):
        from sparsify import SparseCoder, SparseCoderConfig
    return SparseCoder, SparseCoderConfig


class SAEModel(nn.Module):
    """sparsify's TopK `SparseCoder` behind the store's normalisation, with the firing record
    that finds dead latents for the auxiliary loss, all in buffers so a checkpoint holds them."""

    def __init__(self, dim: int, n_latents: int, k: int):
        super().__init__()
        SparseCoder, SparseCoderConfig = _sparsify()
        self.coder = SparseCoder(dim, SparseCoderConfig(num_latents=n_latents, k=k))
        self.register_buffer("norm_mean", torch.zeros(dim))
        self.register_buffer("norm_scale", torch.ones(dim))
        self.register_buffer("rows_since_fired", torch.zeros(n_latents, dtype=torch.long))

    def set_normalization_(self, mean: np.ndarray, scale: np.ndarray) -> None:
        self.norm_mean.copy_(torch.as_tensor(mean))
        self.norm_scale.copy_(torch.as_tensor(scale))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.norm_mean) / self.norm_scale

    def denormalize(self, h: torch.Tensor) -> torch.Tensor:
        return h * self.norm_scale + self.norm_mean

    def dead_mask(self, after: int) -> torch.Tensor:
        """(L,) latents that fired on none of the last `after` training rows."""
        return self.rows_since_fired >= after

    @torch.no_grad()
    def record_firing_(self, acts: torch.Tensor, indices: torch.Tensor) -> None:
        """Count a batch's rows for every latent and restart the count of those that fired."""
        self.rows_since_fired += len(acts)
        self.rows_since_fired[indices[acts > 0]] = 0

    def directions(self) -> torch.Tensor:
        """(L, d) unit decoder rows in the raw space of the store (the normalisation scales each
        dimension, so a normalised direction is rescaled before it is normed)."""
        w = self.coder.W_dec.detach() * self.norm_scale
        return w / w.norm(dim=1, keepdim=True).clamp_min(1e-12)


class SAEConcepts(ModuleMethod):
    """Concepts of a TopK sparse autoencoder: `predict` returns each row's most active latent,
    `concept_extra()["directions"]` the unit decoder rows (L, d) that ablation removes.

    Args:
        n_concepts: latents L.
        k: active latents per row (L0).
        epochs: passes over the fit rows; None picks enough for `min_steps` optimiser steps.
        batch_size: rows per optimiser step.
        lr: Adam's learning rate.
        auxk_alpha: weight of the auxiliary loss that lets dead latents model the residual.
        min_steps: optimiser steps at least, when `epochs` is None.
        seed: the seed of the initialisation and of the row order.
        checkpoint_dir: a folder to checkpoint into, so an interrupted fit resumes; None: none.
        progress: show a progress bar.
        device: the torch device to train on.

    Defaults measured on the default run's fit set (10,000 MiniLM layer-5 rows, d = 384; dev R²
    of the reconstruction, bench/sae_settings.py): L = 4096, k = 32 and lr 1e-3 reach 0.734 with
    1.8% of latents silent on dev rows; sparsify's rate 2e-4 / sqrt(L / 2^14) = 4e-4 gives 0.721, 2048
    latents 0.727 at 60% of the time, k = 16 0.670 with 3.4% dead, 500 steps 0.725 at half
    the time. With only 10,000 fit rows the SAE overfits (train FVU 0.085 against 0.27 on dev).
    auxk_alpha: weight of the auxiliary loss that lets dead latents model the residual (1/32
        as in Gao et al.); a latent is dead when it fired on none of the last
        min(n_rows, 100 L / k) training rows, a hundredth of its fair share, at most one pass.
    epochs: passes over the fit rows; None picks enough for `min_steps` optimiser steps.
    Rows are centred and scaled by one global RMS first (VQLC's 'center_rms').
    """

    name = "sae"
    display_name = "SAE"
    Options = SAEOptions
    encodes = True
    resumable = ("epochs", "progress", "checkpoint_dir", "device")

    def __init__(self, n_concepts: int = LATENTS, k: int = K, epochs: int | None = None, batch_size: int = 256,
                 lr: float = 1e-3, auxk_alpha: float = 1 / 32, min_steps: int = 1000, seed: int = 0,
                 checkpoint_dir: str | None = None, progress: bool = True, device: str = "cpu"):
        self.n_concepts = n_concepts
        self.k = k
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.auxk_alpha = auxk_alpha
        self.min_steps = min_steps
        self.seed = seed
        self.checkpoint_dir = checkpoint_dir
        self.progress = progress
        self.device = device

    @classmethod
    def from_config(cls, mcfg, seed: int, workdir: Path) -> "SAEConcepts":
        """An SAE with the build's latents (`sae_latents`) and k; it checkpoints into `workdir/checkpoint`."""
        o = mcfg.options_of("sae")
        return cls(n_concepts=o["latents"], k=o["k"], seed=seed,
                   checkpoint_dir=str(Path(workdir) / "checkpoint"))

    @classmethod
    def for_predictions(cls, mcfg, seed: int, workdir: Path) -> "SAEConcepts":
        """An SAE of `mcfg.n_concepts` latents for the prediction rows (k capped below them)."""
        o = mcfg.options_of("sae")
        n = int(mcfg.n_concepts)
        return cls(n_concepts=n, k=max(1, min(o["k"], n - 1)), seed=seed,
                   checkpoint_dir=str(Path(workdir) / "checkpoint"))

    def _validate(self) -> None:
        if not 1 <= self.k < self.n_concepts:
            raise RunError(f"The SAE needs 1 <= k < latents, got k = {self.k} and {self.n_concepts} latents; "
                           "lower --sae-k or raise --sae-latents.")
        for key in ("min_steps", "batch_size"):
            if int(getattr(self, key)) < 1:
                raise RunError(f"{key} must be a positive integer, got {getattr(self, key)}.")

    def check_n_rows(self, n_rows: int) -> None:
        """An SAE may have more latents than rows; it needs only more rows than k."""
        if n_rows <= self.k:
            raise RunError(f"The SAE cannot be fitted on {n_rows} rows with k = {self.k}; fit it on more rows.")

    def _build(self, dim: int) -> SAEModel:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return SAEModel(dim, self.n_concepts, self.k).to(self.device)

    # ---- fit --------------------------------------------------------------------------

    def _optimizer(self) -> torch.optim.Optimizer:
        """Adam over the coder. Under torchrun every rank trains the same whole model on CPU (no
        data parallelism: the SAE is small)."""
        return torch.optim.Adam(self.model_.coder.parameters(), lr=self.lr)

    def _begin(self, store, rows: np.ndarray) -> None:
        batches = store.iter_batches(8192, shuffle=False, rows=rows)
        moments = distributed.moments(batches, store.dim, distributed.collectives().all_reduce, self.device)
        self.model_.set_normalization_(*normalization(*moments, "center_rms"))

    def _fit_info(self) -> dict:
        return {"dead_fraction": self.history_[-1]["dead_fraction"] if self.history_ else None}

    def _epoch(self, store, rows: np.ndarray, opt: torch.optim.Optimizer, epoch: int, bar) -> dict:
        model, coder, n = self.model_, self.model_.coder, len(rows)
        dead_after = int(min(n, 100 * self.n_concepts / self.k))
        sums = {"fvu": 0.0, "auxk": 0.0}
        fired = torch.zeros(self.n_concepts, dtype=torch.bool, device=self.device)
        for x in store.iter_batches(self.batch_size, shuffle=True, seed=self.seed + epoch, rows=rows):
            x = x.to(self.device)
            dead = model.dead_mask(dead_after) if self.auxk_alpha > 0 else None
            out = coder(model.normalize(x), dead_mask=dead)
            loss = out.fvu + self.auxk_alpha * out.auxk_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            coder.remove_gradient_parallel_to_decoder_directions()  # the unit norm is kept below
            opt.step()
            coder.set_decoder_norm_to_unit_norm()
            model.record_firing_(out.latent_acts.detach(), out.latent_indices)
            fired[out.latent_indices[out.latent_acts.detach() > 0]] = True
            sums["fvu"] += float(out.fvu.detach()) * len(x)
            sums["auxk"] += float(out.auxk_loss.detach()) * len(x)
            bar.update(1)
        return {**{k: v / n for k, v in sums.items()}, "dead_fraction": float(model.dead_mask(dead_after).float().mean()),
                "unfired_fraction": float((~fired).float().mean())}

    # ---- encode and predict -------------------------------------------------------------

    @torch.no_grad()
    def _run(self, X):
        """Per chunk of raw X: (top-k activations (n, k), their latents (n, k), reconstruction in
        raw space (n, d))."""
        X = self.fitted_tensor(X)
        self.model_.eval()
        for s in range(0, len(X), _CHUNK):
            acts, idx, _ = self.model_.coder.encode(self.model_.normalize(X[s : s + _CHUNK].to(self.device)))
            yield acts.cpu(), idx.cpu(), self.model_.denormalize(self.model_.coder.decode(acts, idx)).cpu()

    def encode(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Top-k activations (N, k) float32 and their latents (N, k) int64 of raw vectors X (N, d);
        an activation of 0 means the latent did not fire."""
        parts = [(a.numpy(), i.numpy()) for a, i, _ in self._run(X)]
        if not parts:
            return np.zeros((0, self.k), np.float32), np.zeros((0, self.k), np.int64)
        return np.concatenate([a for a, _ in parts]), np.concatenate([i for _, i in parts]).astype(np.int64)

    def transform(self, X) -> np.ndarray:
        """Dense latent activations (N, n_concepts) of raw vectors X (N, d)."""
        acts, idx = self.encode(X)
        out = np.zeros((len(acts), self.n_concepts), np.float32)
        np.put_along_axis(out, idx, acts, axis=1)
        return out

    def predict(self, X) -> np.ndarray:
        """The most active latent (int64) of every raw vector of X (N, d)."""
        acts, idx = self.encode(X)
        return np.take_along_axis(idx, acts.argmax(1)[:, None], axis=1)[:, 0].astype(np.int64)

    def predict_proba(self, X) -> np.ndarray:
        """(N, n_concepts) each latent's share of the row's total activation (uniform for a row
        where none fired)."""
        a = self.transform(X)
        total = a.sum(1, keepdims=True)
        return np.where(total > 0, a / np.maximum(total, 1e-30), 1.0 / self.n_concepts).astype(np.float32)

    def reconstruct(self, X) -> np.ndarray:
        """Reconstruction of raw vectors X (N, d) from their k active latents."""
        parts = [r.numpy() for *_, r in self._run(X)]
        return np.concatenate(parts or [np.zeros((0, self.n_features_in_), np.float32)])

    def score_store(self, store, rows: np.ndarray | None = None, batch_size: int = 8192) -> dict:
        """Streamed measures over store rows: R² of the reconstruction in raw space, mean L0,
        the fraction of latents that fire on none of the rows, and the perplexity and dead
        codes of the most-active-latent assignment (as for the other methods)."""
        r2, l0, n = R2Accumulator(), 0, 0
        fired = np.zeros(self.n_concepts, dtype=bool)
        counts = np.zeros(self.n_concepts, dtype=np.int64)
        for x in store.iter_batches(batch_size, shuffle=False, rows=rows):
            recon = []
            for acts, idx, r in self._run(x):
                on = acts > 0
                fired[idx[on].numpy()] = True
                l0 += int(on.sum())
                top = idx.gather(1, acts.argmax(1, keepdim=True))[:, 0]  # the most active latent
                counts += np.bincount(top.numpy(), minlength=self.n_concepts)
                recon.append(r)
            r2.update(x, torch.cat(recon))
            n += len(x)
        return {"r2": r2.value(), "l0": l0 / max(n, 1), "dead_fraction": float(1 - fired.mean()),
                "perplexity": perplexity_from_counts(counts), "dead_codes": int((counts == 0).sum())}

    def concept_extra(self) -> dict[str, np.ndarray]:
        """The unit decoder rows (L, d) in raw space: each concept's direction."""
        self.check_fitted("model_")
        return {"directions": self.model_.directions().cpu().numpy()}
