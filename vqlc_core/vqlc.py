"""VQLC, the estimator: trains a `VQModel` on mini-batches streamed from an activation store,
so memory does not grow with the number of rows, and maps raw store vectors to codes.
Checkpoints are safetensors plus JSON (never pickle); a killed fit resumes where it stopped.
Under torchrun every rank trains the same model on its slice of each global batch (see `fit`).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from . import distributed
from .methods import ConceptMethod
from .metrics import R2Accumulator, perplexity_from_counts
from .runio import RunError, read_safetensors, write_json, write_safetensors
from .vq import VQModel, farthest_first

WEIGHTS_FILE = "vqlc.safetensors"
META_FILE = "vqlc.json"
FORMAT_VERSION = 1
NORMALIZE = ("none", "standard", "center_rms")
# Parameters that may change between a killed fit and its resume without changing the result.
_RESUMABLE = ("epochs", "progress", "checkpoint_dir", "device")


def _moments(store, rows, batch_size: int, all_reduce, device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and variance of the selected rows, in one streamed pass (float64).

    Rank r sums batches r, r+N, ...; the sums and the count are then all-reduced."""
    n, s, ss = 0, torch.zeros(store.dim, dtype=torch.float64), torch.zeros(store.dim, dtype=torch.float64)
    batches = store.iter_batches(batch_size, shuffle=False, rows=rows)
    for x in itertools.islice(batches, distributed.rank(), None, distributed.world()):
        x = x.double()
        n += len(x)
        s += x.sum(0)
        ss += x.pow(2).sum(0)
    total = torch.cat([torch.tensor([float(n)], dtype=torch.float64), s, ss]).to(device)  # (1 + 2d,)
    all_reduce(total)
    n, s, ss = total.cpu()[0], total.cpu()[1 : 1 + store.dim], total.cpu()[1 + store.dim :]
    mean = s / n
    return mean.numpy(), (ss / n - mean.pow(2)).clamp_min(0.0).numpy()


def _all_reduce_grads_(params: list[torch.Tensor], all_reduce) -> None:
    """Sum every gradient over the ranks in one all-reduce of a flat buffer (a parameter a rank
    left without gradient counts as zero)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat)
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad = g.view_as(p)


def _noop(*args) -> None:
    return None


def _read_meta(path: Path) -> dict:
    """The metadata stored inside a vqlc.safetensors file (it is written in one atomic rename
    with the tensors, so the two can never disagree)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = (f.metadata() or {}).get("vqlc")
    if meta is None:
        raise RunError(f"{path} holds no VQLC metadata; it was not written by VQLC.save.")
    return json.loads(meta)


class VQLC(ConceptMethod):
    """Vector Quantized Latent Concepts: residual encoder, EMA codebook of `n_concepts` codes,
    residual decoder; `predict` returns the index of the closest code in the code book.

    beta: weight of the commitment loss. decay, eps: EMA decay and Laplace smoothing of counts.
    dead_threshold: a code is re-seeded when its EMA count falls below this fraction of its
        share under uniform use (batch_size / n_concepts).
    hidden: width of the encoder's and decoder's non-linear branch.
    init_sample: at most this many rows seed the codebook by farthest-first traversal.
    normalize: 'center_rms' (default: subtract the mean, divide by one global RMS), 'standard'
        (per-dimension mean and std) or 'none'; statistics come from one streamed pass over the
        fit rows, and transform / predict apply them, so callers pass raw store rows.
        Chosen by measurement (bench/normalization.py, K = 400 on the default fit sets): on
        MiniLM it gives dev R² 0.387 against 0.362 for 'standard' at equal perplexity; on
        SmolLM2 R² 0.324 against 0.309 and perplexity 118 against 103, with the largest concept
        holding 3.7% of rows against 6.3%. Per-dimension scaling blows up the many
        low-variance dimensions and lets them dominate distances; one global scale keeps the
        geometry of the model's space (its huge-valued dimensions mostly sit on the BOS
        position, which is never a row) while making the loss scale-free across models.
    epochs: passes over the fit rows; None (default) picks enough for `min_steps` optimiser
        steps, so small fit sets train long enough and large stores take one pass.
    checkpoint_dir: when set, a checkpoint is written after every epoch and fit resumes from it.
    """

    name = "vqlc"

    def __init__(self, n_concepts: int = 400, beta: float = 0.25, decay: float = 0.99, eps: float = 1e-5,
                 dead_threshold: float = 0.05, epochs: int | None = None, batch_size: int = 256, lr: float = 1e-3,
                 hidden: int = 256, init_sample: int = 20000, normalize: str = "center_rms", seed: int = 0,
                 checkpoint_dir: str | None = None, device: str = "cpu", progress: bool = True,
                 min_steps: int = 1000):
        self.n_concepts = n_concepts
        self.beta = beta
        self.decay = decay
        self.eps = eps
        self.dead_threshold = dead_threshold
        self.epochs = epochs
        self.min_steps = min_steps
        self.batch_size = batch_size
        self.lr = lr
        self.hidden = hidden
        self.init_sample = init_sample
        self.normalize = normalize
        self.seed = seed
        self.checkpoint_dir = checkpoint_dir
        self.device = device
        self.progress = progress

    # ---- parameters -------------------------------------------------------------------

    def get_params(self) -> dict:
        return {k: getattr(self, k) for k in (
            "n_concepts", "beta", "decay", "eps", "dead_threshold", "epochs", "min_steps", "batch_size", "lr", "hidden",
            "init_sample", "normalize", "seed", "checkpoint_dir", "device", "progress")}

    def _validate(self) -> None:
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}.")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {self.decay}.")
        for key in ("n_concepts", "min_steps", "batch_size", "hidden", "init_sample"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be a positive integer, got {getattr(self, key)}.")

    def epochs_for(self, n_rows: int) -> int:
        """Epochs of a fit on n_rows: `epochs` when set, else enough for `min_steps` steps (the
        EMA codebook needs a few hundred updates to settle; at 1M rows one epoch is plenty)."""
        if self.epochs is not None:
            return int(self.epochs)
        return max(1, min(100, math.ceil(self.min_steps * self.batch_size / max(n_rows, 1))))

    # ---- building blocks --------------------------------------------------------------

    def _build(self, dim: int) -> tuple[VQModel, torch.optim.Adam]:
        threshold = self.dead_threshold * self.batch_size / self.n_concepts
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = VQModel(dim, self.n_concepts, hidden=self.hidden, beta=self.beta, decay=self.decay,
                            eps=self.eps, dead_threshold=threshold).to(self.device)
        return model, torch.optim.Adam(model.parameters(), lr=self.lr, foreach=True)

    def _set_normalization(self, store, rows) -> None:
        d = store.dim
        if self.normalize == "none":
            self.mean_, self.scale_ = np.zeros(d, np.float32), np.ones(d, np.float32)
            return
        mean, var = _moments(store, rows, max(self.batch_size, 8192), distributed.collectives().all_reduce, self.device)
        if self.normalize == "standard":
            std = np.sqrt(var)
            scale = np.where(std > 1e-8, std, 1.0)
        else:
            scale = np.full(d, max(math.sqrt(var.mean()), 1e-8))
        self.mean_, self.scale_ = mean.astype(np.float32), scale.astype(np.float32)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean_, device=x.device)
        scale = torch.as_tensor(self.scale_, device=x.device)
        return (x - mean) / scale  # (B, d)

    def _init_codebook(self, store, rows) -> None:
        """Farthest-first codes from a seeded sample, computed on rank 0 and broadcast by `init_`."""
        cb = self.model_.codebook
        codes = torch.zeros_like(cb.embed)  # (K, dz)
        if distributed.is_main():
            n = store.n_rows if rows is None else len(rows)
            k = min(self.init_sample, n)
            if rows is None:
                sample = store.sample(k, self.seed)
            else:
                pick = np.random.default_rng(self.seed).choice(rows, size=k, replace=False)
                sample = store.read(np.sort(pick))
            with torch.no_grad():
                z = self.model_.encoder(self._norm(torch.from_numpy(sample).to(self.device)))  # (k, dz)
            codes = farthest_first(z, self.n_concepts, self.seed)
        cb.init_(codes, count=self.batch_size / self.n_concepts)

    def _as_tensor(self, X) -> torch.Tensor:
        self.check_fitted("model_")
        X = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X, dtype=torch.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"VQLC expects an (N, {self.n_features_in_}) array, got shape {tuple(X.shape)}.")
        return X

    @torch.no_grad()
    def _run(self, X: torch.Tensor, chunk: int = 8192):
        """Per chunk of raw X: (z, code index, reconstruction in raw space, normalised input,
        reconstruction in normalised space)."""
        self.model_.eval()
        for s in range(0, len(X), chunk):
            h = self._norm(X[s : s + chunk].to(self.device))
            out = self.model_(h)
            recon = out.recon * torch.as_tensor(self.scale_, device=h.device) + torch.as_tensor(self.mean_, device=h.device)
            yield out.z, out.indices, recon, h, out.recon

    # ---- fit --------------------------------------------------------------------------

    def fit(self, store, rows: np.ndarray | None = None) -> "VQLC":
        """Train on the store's `rows` (all rows when None), streaming mini-batches; returns self.

        Under torchrun every rank reads the same shuffled stream of global batches of
        `batch_size` rows and trains on its contiguous slice of each; gradients and the
        codebook's EMA sums and counts are summed over the ranks, so all ranks hold one model,
        equal (up to float summation order) to the model one process trains. Only rank 0 writes.
        """
        self._validate()
        rows = None if rows is None else np.sort(np.asarray(rows, dtype=np.int64))
        n = store.n_rows if rows is None else len(rows)
        self.check_n_rows(n)
        t0 = time.perf_counter()
        with self.measure_fit(n):
            self.n_features_in_ = store.dim
            self.model_, opt = self._build(store.dim)
            for t in self.model_.state_dict().values():  # one model on every rank from the start
                distributed.collectives().broadcast(t)
            start = self._resume(opt, store.dim) if self.checkpoint_dir else None
            if start is None:
                start, self.history_ = 0, []
                self._set_normalization(store, rows)
                self._init_codebook(store, rows)
            self._train(store, rows, opt, start, n)
            self.model_.eval()
        self.fit_time_s_ = time.perf_counter() - t0
        return self

    def _train(self, store, rows, opt, start: int, n: int) -> None:
        model, cb = self.model_, self.model_.codebook
        all_reduce = distributed.collectives().all_reduce
        reduce_grads_ = _all_reduce_grads_ if distributed.world() > 1 else _noop  # chosen once
        params = list(model.parameters())
        steps = math.ceil(n / self.batch_size)
        self.n_epochs_ = self.epochs_for(n)
        bar = tqdm(total=self.n_epochs_ * steps, initial=min(start, self.n_epochs_) * steps, desc="vqlc",
                   disable=None if self.progress and distributed.is_main() else True, unit="step")
        for epoch in range(start, self.n_epochs_):
            model.train()
            sums = {"loss": 0.0, "rec": 0.0, "commit": 0.0}
            counts = torch.zeros(self.n_concepts, dtype=torch.long)
            replaced = 0
            for batch in store.iter_batches(self.batch_size, shuffle=True, seed=self.seed + epoch, rows=rows):
                x = distributed.local_slice(batch)  # (B_r, d), this rank's part of the global batch
                out = model(self._norm(x.to(self.device)))
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
            totals = torch.tensor(list(sums.values()), dtype=torch.float64, device=self.device)
            counts = counts.to(self.device)
            all_reduce(totals)
            all_reduce(counts)
            sums, counts = dict(zip(sums, totals.tolist())), counts.cpu()
            self.history_.append({"epoch": epoch + 1, **{k: v / n for k, v in sums.items()},
                                  "perplexity": perplexity_from_counts(counts), "dead_codes": int((counts == 0).sum()),
                                  "replaced": replaced})
            if self.checkpoint_dir:
                self._write(Path(self.checkpoint_dir), opt=opt, epoch=epoch + 1)
        bar.close()

    # ---- predict ----------------------------------------------------------------------

    def transform(self, X) -> np.ndarray:
        """Encodings z (N, dz) float32 of raw vectors X (N, d)."""
        X = self._as_tensor(X)
        return np.concatenate([z.cpu().numpy() for z, *_ in self._run(X)] or [np.zeros((0, self.n_features_in_), np.float32)])

    def predict(self, X) -> np.ndarray:
        """Index (int64) of the closest code in the code book for every raw vector of X (N, d)."""
        X = self._as_tensor(X)
        return np.concatenate([i.cpu().numpy() for _, i, *_ in self._run(X)] or [np.zeros(0, np.int64)]).astype(np.int64)

    def reconstruct(self, X) -> np.ndarray:
        """Reconstruction of raw vectors X (N, d) through encoder, nearest code and decoder."""
        X = self._as_tensor(X)
        return np.concatenate([r.cpu().numpy() for _, _, r, *_ in self._run(X)])

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
            for z, idx, *_ in self._run(self._as_tensor(x), chunk=batch_size):
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
            for _, idx, recon, h, recon_n in self._run(self._as_tensor(x), chunk=batch_size):
                raw.update(x, recon)
                normed.update(h, recon_n)
                counts += np.bincount(idx.cpu().numpy(), minlength=self.n_concepts)
        return {"r2": raw.value(), "r2_normalized": normed.value(), "perplexity": perplexity_from_counts(counts),
                "dead_codes": int((counts == 0).sum())}

    @property
    def codebook_(self) -> np.ndarray:
        """The code book (K, dz) in encoding space."""
        self.check_fitted("model_")
        return self.model_.codebook.embed.detach().cpu().numpy().copy()

    def concept_extra(self) -> dict[str, np.ndarray]:
        """VQLC's arrays for the concept set: the codes and, after predict_store, the mean encodings."""
        extra = {"codes": self.codebook_}
        if getattr(self, "encoding_means_", None) is not None:
            extra["encodings"] = self.encoding_means_
        return extra

    # ---- save / load / resume ---------------------------------------------------------

    def _write(self, path: Path, opt: torch.optim.Optimizer | None = None, epoch: int | None = None) -> None:
        if not distributed.is_main():
            return  # every rank holds the same model; rank 0 writes it
        tensors = {f"model.{k}": v for k, v in self.model_.state_dict().items()}
        tensors["norm.mean"] = torch.from_numpy(self.mean_)
        tensors["norm.scale"] = torch.from_numpy(self.scale_)
        if opt is not None:
            for i, state in opt.state_dict()["state"].items():
                for key, value in state.items():
                    tensors[f"optim.{i}.{key}"] = torch.as_tensor(value)
        meta = {"format_version": FORMAT_VERSION, "method": self.name, "params": self.get_params(),
                "dim": self.n_features_in_, "history": self.history_, "epoch": epoch if epoch is not None else len(self.history_),
                "fit_time_s": getattr(self, "fit_time_s_", None), "fit_info": getattr(self, "fit_info_", {}),
                "has_optimizer": opt is not None}
        write_safetensors(path / WEIGHTS_FILE, tensors, metadata={"vqlc": json.dumps(meta)})
        write_json(path / META_FILE, meta)

    def _restore(self, tensors: dict, meta: dict) -> None:
        self.model_.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        self.model_.to(self.device)
        self.mean_ = tensors["norm.mean"].numpy()
        self.scale_ = tensors["norm.scale"].numpy()
        self.history_ = list(meta["history"])
        self.n_features_in_ = int(meta["dim"])

    def _resume(self, opt: torch.optim.Optimizer, dim: int) -> int | None:
        """Load the checkpoint in checkpoint_dir into model and optimizer; return its epoch, or
        None when there is none. A checkpoint that already trained `epochs` is kept as is."""
        path = Path(self.checkpoint_dir) / WEIGHTS_FILE
        if not path.exists():
            return None
        meta = _read_meta(path)
        mine = {k: v for k, v in self.get_params().items() if k not in _RESUMABLE}
        theirs = {k: v for k, v in meta["params"].items() if k not in _RESUMABLE}
        if mine != theirs or meta["dim"] != dim:
            diff = sorted(k for k in mine if mine[k] != theirs.get(k)) or ["dim"]
            raise ValueError(f"The checkpoint in {self.checkpoint_dir} was written with other settings "
                             f"({', '.join(diff)}); use another checkpoint_dir or delete it.")
        tensors = read_safetensors(path)
        self._restore(tensors, meta)
        state = opt.state_dict()
        for i in state["param_groups"][0]["params"]:
            state["state"][i] = {k.split(".", 2)[2]: v for k, v in tensors.items() if k.startswith(f"optim.{i}.")}
        opt.load_state_dict(state)
        return int(meta["epoch"])

    def save(self, path: str | Path) -> None:
        """Write `vqlc.safetensors` (module state, buffers, normalisation) and `vqlc.json` into folder path."""
        self.check_fitted("model_")
        self._write(Path(path))

    @classmethod
    def load(cls, path: str | Path) -> "VQLC":
        """A fitted VQLC from a folder written by `save` (or a fit's checkpoint_dir)."""
        path = Path(path)
        if not (path / WEIGHTS_FILE).exists():
            raise RunError(f"No fitted VQLC in {path}; rebuild this method's stage.")
        meta = _read_meta(path / WEIGHTS_FILE)
        if meta.get("format_version") != FORMAT_VERSION:
            raise RunError(f"The VQLC in {path} has format {meta.get('format_version')}, expected {FORMAT_VERSION}; "
                           "rebuild this method's stage.")
        self = cls(**meta["params"])
        self.model_, _ = self._build(int(meta["dim"]))
        self._restore(read_safetensors(path / WEIGHTS_FILE), meta)
        self.model_.eval()
        self.fit_time_s_ = meta.get("fit_time_s")
        self.fit_info_ = meta.get("fit_info", {})
        return self
