"""The classifier whose predictions are explained: the frozen backbone pooled at its last layer
and a linear head trained on the train split (or a sequence-classification model's own head).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from vqlc_core.data.backbone import Backbone
from vqlc_core.base.runio import RunError, read_json, read_safetensors, write_json, write_safetensors


@torch.inference_mode()
def pooled_features(backbone: Backbone, texts: list[str], batch_size: int = 32, autocast_dtype=None,
                    progress: bool = True) -> np.ndarray:
    """The pooled last-layer representation (n, d) of every text, in length-sorted batches."""
    lengths = np.asarray([len(t) for t in texts])
    order = np.argsort(-lengths, kind="stable")
    out = np.zeros((len(texts), backbone.hidden_size), dtype=np.float32)
    for b in tqdm(range(0, len(texts), batch_size), desc="classifier features", disable=not progress):
        idx = order[b : b + batch_size]
        enc, _ = backbone.tokenize([texts[i] for i in idx])
        h = backbone.final_states(enc, autocast_dtype)
        out[idx] = backbone.pool(h, enc["attention_mask"]).numpy()
    return out


class Classifier:
    """Text -> class probabilities. `logits(enc)` runs the whole model; hooks placed on the
    backbone (ablation) act inside it."""

    def __init__(self, backbone: Backbone, class_names: list[str], head: nn.Linear | None = None):
        if head is None and not backbone.is_classifier:
            raise RunError("A classifier needs a trained head or a sequence-classification model.")
        self.backbone, self.class_names, self.head = backbone, list(class_names), head

    def logits(self, enc, autocast_dtype=None) -> torch.Tensor:
        if self.head is None:
            return self.backbone.model(**self.backbone.inputs(enc)).logits.float().cpu()
        h = self.backbone.final_states(enc, autocast_dtype)
        return self.head(self.backbone.pool(h, enc["attention_mask"]))

    @torch.inference_mode()
    def predict_proba(self, texts: list[str]) -> np.ndarray:
        enc, _ = self.backbone.tokenize(texts)
        return torch.softmax(self.logits(enc), -1).numpy()

    @classmethod
    def train(cls, backbone: Backbone, features: np.ndarray, labels: np.ndarray, class_names: list[str],
              seed: int = 0, C: float = 1.0) -> "Classifier":
        """Fit a logistic-regression head on standardised features and fold the scaling into it."""
        from sklearn.linear_model import LogisticRegression

        mu, sd = features.mean(0), features.std(0) + 1e-6
        lr = LogisticRegression(C=C, max_iter=2000, random_state=seed)
        lr.fit((features - mu) / sd, labels)
        coef, intercept = lr.coef_, lr.intercept_
        if coef.shape[0] == 1:  # binary: sklearn keeps one row; make it two logits
            coef = np.concatenate([-coef / 2, coef / 2])
            intercept = np.concatenate([-intercept / 2, intercept / 2])
        w = coef / sd
        b = intercept - (coef * mu / sd).sum(1)
        head = nn.Linear(features.shape[1], len(class_names))
        with torch.no_grad():
            head.weight.copy_(torch.as_tensor(w, dtype=torch.float32))
            head.bias.copy_(torch.as_tensor(b, dtype=torch.float32))
        head.requires_grad_(False)
        return cls(backbone, class_names, head)

    def head_proba(self, features: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return torch.softmax(self.head(torch.as_tensor(features)), -1).numpy()

    def save(self, path: str | Path) -> None:
        path = Path(path)
        if self.head is not None:
            write_safetensors(path / "head.safetensors", {"weight": self.head.weight, "bias": self.head.bias})
        write_json(path / "classifier.json", {"class_names": self.class_names, "has_head": self.head is not None})

    @classmethod
    def load(cls, path: str | Path, backbone: Backbone) -> "Classifier":
        path = Path(path)
        meta = read_json(path / "classifier.json")
        head = None
        if meta["has_head"]:
            t = read_safetensors(path / "head.safetensors")
            if t["weight"].shape[1] != backbone.hidden_size:
                raise RunError(f"Classifier head expects hidden size {t['weight'].shape[1]}, "
                               f"got {backbone.hidden_size}; rebuild the 'classifier' stage.")
            head = nn.Linear(t["weight"].shape[1], t["weight"].shape[0])
            head.load_state_dict(t)
            head.requires_grad_(False)
        return cls(backbone, meta["class_names"], head)
