"""Faithfulness of concept explanations over a test set: per method, ablate the concept of the
prediction representation, the concept of the top salient word, and (control) a random
direction of the same norm, and report the mean drop in the predicted class's confidence and
the label-flip rate.

Texts run in length-sorted batches: one forward gives layer-l states and probabilities, one
batched attribution pass finds each text's top salient word, and every ablation of a batch
(all methods and targets together) is one more forward that starts at layer l.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .ablation import project_out
from .explain import Explainer, word_scores

TARGETS = ("prediction concept", "salient-word concept", "random direction")


def _unit_rows(V: np.ndarray) -> torch.Tensor:
    """(B, 1, d) per-example bases: each row normalised, zero rows kept zero (nothing removed)."""
    n = np.linalg.norm(V, axis=1, keepdims=True)
    return torch.as_tensor(np.where(n > 0, V / np.maximum(n, 1e-30), 0.0), dtype=torch.float32)[:, None, :]


def faithfulness(explainer: Explainer, texts: list[str], seed: int = 0, progress: bool = True,
                 max_texts: int | None = None, batch_size: int = 32, salient: str = "ig") -> pd.DataFrame:
    """One row per (method, target): mean_conf_drop (old minus new probability of the predicted
    class), flip_rate (share of texts whose predicted class changes) and n (texts counted).

    salient: "ig" (Integrated Gradients with the explainer's `ig_steps`) or "grad_x_input"
    (one gradient, faster) to find the top salient word. The random directions are drawn with
    `seed`, one per text and method, independently of batching. Empty texts are skipped.
    `df.attrs["seconds"]` holds the wall time."""
    start = time.perf_counter()
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    texts = texts[:max_texts] if max_texts is not None else texts
    bb, names = explainer.backbone, list(explainer.methods)
    rng = np.random.default_rng(seed)
    random_dirs = {name: rng.standard_normal((len(texts), bb.hidden_size)) for name in names}
    sums = {(m, t): [0.0, 0, 0] for m in names for t in TARGETS}  # drop sum, flips, n

    lengths = np.asarray([len(t) for t in texts])
    order = np.argsort(-lengths, kind="stable")
    batches = [order[b : b + batch_size] for b in range(0, len(texts), batch_size)]
    for idx in tqdm(batches, desc="faithfulness", disable=not progress):
        enc, words = bb.tokenize([texts[i] for i in idx])
        enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        states, proba = explainer.forward(enc)  # (B, T, d), (B, C)
        B = len(idx)
        pred = proba.argmax(1)
        conf = proba[np.arange(B), pred]
        pooled = bb.pool(states, enc["attention_mask"]).numpy()

        attr = explainer.attributions(enc, states, pred, salient)
        has_word = np.asarray([len(w) > 0 for w in words])
        top_word = [[w[int(np.argmax(word_scores(attr[b], w)))]] if w else [] for b, w in enumerate(words)]
        top_vecs = np.stack([explainer.word_vectors(states[b], tw)[0] if tw else np.zeros(states.shape[-1], np.float32)
                             for b, tw in enumerate(top_word)])  # (B, d), aggregated as the store's rows

        bases, keys = [], []
        for m, name in enumerate(names):
            method, concepts = explainer.methods[name]
            v_pred = concepts.vectors[method.predict(pooled)]
            v_word = concepts.vectors[method.predict(top_vecs)]
            r = random_dirs[name][idx]
            v_rand = r / np.linalg.norm(r, axis=1, keepdims=True) * np.linalg.norm(v_pred, axis=1, keepdims=True)
            for target, V in zip(TARGETS, (v_pred, v_word, v_rand)):
                bases.append(_unit_rows(V))
                keys.append((name, target))
        if not bases:
            continue
        n_runs = len(bases)
        rep = {k: v.repeat(n_runs, 1) for k, v in enc.items()}
        edited = project_out(states.repeat(n_runs, 1, 1), torch.cat(bases))  # (n_runs*B, T, d)
        new = explainer.proba_from_states(rep, edited).reshape(n_runs, B, -1)
        for j, key in enumerate(keys):
            keep = has_word if key[1] == "salient-word concept" else np.ones(B, dtype=bool)
            p_new = new[j][np.arange(B), pred]
            s = sums[key]
            s[0] += float((conf - p_new)[keep].sum())
            s[1] += int((new[j].argmax(1) != pred)[keep].sum())
            s[2] += int(keep.sum())

    rows = [{"method": m, "target": t, "mean_conf_drop": s[0] / s[2] if s[2] else float("nan"),
             "flip_rate": s[1] / s[2] if s[2] else float("nan"), "n": s[2]} for (m, t), s in sums.items()]
    df = pd.DataFrame(rows, columns=["method", "target", "mean_conf_drop", "flip_rate", "n"])
    df.attrs["seconds"] = time.perf_counter() - start
    return df
