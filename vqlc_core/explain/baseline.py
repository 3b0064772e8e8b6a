"""The neutral baseline of Integrated Gradients: the layer-l state IG starts from at every word
token, chosen so that the classifier, run on from it, predicts every class about equally.

Why: from the train rows' mean state the fine-tuned MiniLM already predicts "positive" (0.89 for
sentences predicted positive, 0.16 for those predicted negative), so for a positive prediction IG
has almost nothing to distribute, and which words come out salient depends on noise. The
baseline here is a point of the line (plane, for more classes) through the class-balanced mean of
the train word states along the class means, b = μ̄ + Σ_c a_c (μ_c - μ̄), with the weights a
fitted so that the mean cross-entropy of the predictions on a seeded sample of train texts to the
uniform distribution is smallest. Special tokens keep their own states, as in IG itself.
"""

from __future__ import annotations

import numpy as np
import torch

from vqlc_core.explain.ablation import from_layer


def class_means(store, labels: np.ndarray | None = None) -> np.ndarray:
    """(C, d) mean state of the store's train word rows of each label (the token table's `label`)."""
    tokens = store.tokens
    mask = ((tokens["split"] == "train") & (tokens["kind"] == "word")).to_numpy()
    rows = np.flatnonzero(mask)
    lab = tokens["label"].to_numpy()[rows] if labels is None else np.asarray(labels)[rows]
    classes = np.unique(lab)
    sums = np.zeros((len(classes), store.dim))
    counts = np.zeros(len(classes))
    start = 0
    for x in store.iter_batches(16384, shuffle=False, rows=rows):
        ids = np.searchsorted(classes, lab[start : start + len(x)])
        np.add.at(sums, ids, x.double().numpy())
        np.add.at(counts, ids, 1)
        start += len(x)
    return (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)


def neutral_baseline(explainer, texts: list[str], means: np.ndarray, steps: int = 40, lr: float = 0.2,
                     batch_size: int = 32) -> tuple[np.ndarray, dict]:
    """(d,) the neutral baseline state for `explainer`'s classifier from the class means (C, d)
    (see the module docstring), fitted on `texts`, and facts about it: the weights a, and the
    mean predicted probabilities of the calibration texts run on from it."""
    means_t = torch.as_tensor(np.asarray(means, dtype=np.float32))  # (C, d)
    centre = means_t.mean(0)  # the class-balanced mean
    spread = means_t - centre  # (C, d)
    bb = explainer.backbone
    batches = []
    for s in range(0, len(texts), batch_size):
        enc, _ = bb.tokenize(texts[s : s + batch_size])
        enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        states, _ = explainer.forward(enc)
        special = torch.as_tensor(np.isin(enc["input_ids"].numpy(), list(bb.tokenizer.all_special_ids)))
        batches.append((enc, states, special | (enc["attention_mask"] == 0)))
    a = torch.zeros(len(means_t), requires_grad=True)
    opt = torch.optim.Adam([a], lr=lr)

    def proba(b: torch.Tensor) -> torch.Tensor:
        out = []
        for enc, states, keep in batches:
            base = torch.where(keep[..., None], states, b.to(states.dtype))
            # float32, as Integrated Gradients runs from this baseline (`attribution`): on a CPU a
            # bfloat16 forward and backward of MiniLM took 8.6-9.1 s against 0.34-0.45 s in float32
            with from_layer(bb, explainer.layer, base.float()):
                out.append(torch.softmax(explainer.classifier.logits(enc).float(), -1))
        return torch.cat(out)  # (n, C)

    with torch.enable_grad():
        for _ in range(steps):
            p = proba(centre + a @ spread)
            loss = -torch.log(p.clamp_min(1e-12)).mean()  # cross-entropy to the uniform distribution
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        b = centre + a @ spread
        p = proba(b).mean(0)
    return b.numpy().astype(np.float32), {"weights": [round(float(x), 4) for x in a.detach()],
                                           "calibration_probabilities": [float(x) for x in p],
                                           "n_calibration_texts": len(texts)}
