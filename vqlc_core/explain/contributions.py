"""The concept attribution of a prediction: every concept present in the input (the distinct
concepts of its words, and the prediction representation's top concept) scored by its exact
single-concept ablation effect on the predicted class's probability,

    score_k = p_pred(x) - p_pred(x with concept k's centred direction projected out of layer l
                                 at every position),

which is what the page's Ablate toggle for k does, so the list and the toggle agree by
construction. Positive: the concept supports the predicted class.

Because the score is itself an intervention, what is left to say is how far the single effects
add up: the joint effect J of removing all the input's concepts together against the sum of the
single effects, the interaction share |J - sum_k s_k| / (|J| + sum_k |s_k|) (0: the effects add
up exactly; 1: nothing of the joint effect is in the single effects; it is at most 1 by the
triangle inequality). And the deletion curve: p_pred as the top-1, top-2, ... concepts are
removed together (the span of their directions), whose area over the curve is ERASER's AOPC.

All singles, the joint removal and every deletion prefix of every text and method are one
batched forward from layer l each (two in all: the ranking needs the singles first).
"""

from __future__ import annotations

import numpy as np
import torch

from vqlc_core.explain.ablation import from_layer, orthonormal_basis, project_out
from vqlc_core.explain.records import ConceptContribution


def interaction_share(joint: float, singles) -> float:
    """|joint - sum(singles)| / (|joint| + sum |singles|): the share of the effects that is
    interaction (0 when they add up; 0 when there is no effect at all)."""
    s = np.asarray(singles, dtype=np.float64)
    den = abs(joint) + np.abs(s).sum()
    return float(abs(joint - s.sum()) / den) if den > 0 else 0.0


def aopc(p0: float, curve) -> float:
    """ERASER's area over the deletion curve: mean over k of p0 - p_k (p_k: after removing the
    top k parts); NaN for an empty curve."""
    c = np.asarray(curve, dtype=np.float64)
    return float(np.mean(p0 - c)) if len(c) else float("nan")


def present_concepts(word_ids: list[int], prediction_concept: int | None) -> list[tuple[int, list[int], str]]:
    """The concepts present in one input, each once in order of first appearance: (concept, the
    indices of the words assigned to it, kind), the prediction concept last unless a word has it."""
    words: dict[int, list[int]] = {}
    for i, k in enumerate(word_ids):
        words.setdefault(int(k), []).append(i)
    out = [(k, w, "word") for k, w in words.items()]
    if prediction_concept is not None:
        k = int(prediction_concept)
        if k in words:
            out = [(c, w, "word+prediction" if c == k else kind) for c, w, kind in out]
        else:
            out.append((k, [], "prediction"))
    return out


def removal_proba(explainer, passes, requests: list[tuple[int, str, list[int]]]) -> np.ndarray:
    """(R, C) class probabilities for requests (pass index, method, concept ids): each pass's
    layer-l states with the span of those concepts' centred directions projected out, run on
    from layer l in one batched forward (the caller holds the backbone's lock)."""
    if not requests:
        return np.zeros((0, len(explainer.classifier.class_names)), dtype=np.float32)
    ps = [passes[i] for i, _, _ in requests]
    bases = [explainer._basis(m, ids) for _, m, ids in requests]
    enc, states = explainer._stack(ps, [project_out(p.states, q) for p, q in zip(ps, bases)])
    return explainer.proba_from_states(enc, states)


def prefix_ids(ranked: list[int]) -> list[list[int]]:
    """The deletion prefixes of a ranking: the top 1, top 2, ..., all of it."""
    return [ranked[: n + 1] for n in range(len(ranked))]


def contributions(explainer, passes, preds: list[int], per_text: list[dict]) -> list[dict]:
    """Per text, per method: (records ranked by score, deletion curve, joint drop, interaction
    share). per_text[b] maps a method to (its ConceptSet, the words' concept ids, the prediction
    concept id). Two forwards from layer l for every text and method together."""
    names = explainer.classifier.class_names
    asks, where = [], []  # where: (b, method, concepts present)
    for b, methods in enumerate(per_text):
        for m, (_, ids, k_pred) in methods.items():
            present = present_concepts(ids, k_pred)
            where.append((b, m, present))
            asks += [(b, m, [k]) for k, _, _ in present] + [(b, m, [k for k, _, _ in present])]
    first = removal_proba(explainer, passes, asks)
    out: list[dict] = [{} for _ in per_text]
    second, ranked_of, pos = [], {}, 0
    for b, m, present in where:
        n = len(present)
        single, joint = first[pos : pos + n], first[pos + n]
        pos += n + 1
        p0 = float(passes[b].proba[preds[b]])
        scores = p0 - single[:, preds[b]]
        order = np.argsort(-scores, kind="stable")
        cs = per_text[b][m][0]
        records = [ConceptContribution(int(present[i][0]), cs.label(int(present[i][0])), float(scores[i]),
                                       float(single[i, preds[b]]), names[int(np.argmax(single[i]))],
                                       list(present[i][1]), present[i][2]) for i in order]
        ranked_of[(b, m)] = (records, float(p0 - joint[preds[b]]), interaction_share(p0 - joint[preds[b]], scores),
                             float(joint[preds[b]]))
        second += [(b, m, ids) for ids in prefix_ids([r.concept for r in records])[1:-1]]  # top-1, all: known
    middle = removal_proba(explainer, passes, second)
    pos = 0
    for b, m, present in where:
        records, joint, share, p_all = ranked_of[(b, m)]
        n = len(records)
        curve = ([records[0].ablated_proba] if n else []) + [float(x) for x in middle[pos : pos + max(n - 2, 0), preds[b]]]
        curve += [p_all] if n > 1 else []
        pos += max(n - 2, 0)
        out[b][m] = (records, curve, joint, share)
    return out


def word_order_scores(word_ids: list[int], present: list[int], word_scores) -> np.ndarray:
    """Per concept of `present`: the sum of the word scores (e.g. Integrated Gradients) of the
    words assigned to it (0 for a concept no word has, e.g. the prediction concept alone)."""
    w = np.asarray(word_scores, dtype=np.float64)
    ids = np.asarray(word_ids)
    return np.asarray([w[ids == k].sum() if len(w) else 0.0 for k in present])


def patching_scores(explainer, p, pred: int, method: str, present: list[int]) -> np.ndarray:
    """Attribution patching (AtP) of each concept's single ablation: the gradient of p_pred with
    respect to the layer-l states (one backward), dotted with the change the ablation makes,
    summed over positions; with the sign of the score (p_pred before minus after)."""

    states = p.states.detach().float().clone().requires_grad_(True)
    with torch.enable_grad(), from_layer(explainer.backbone, explainer.layer, states):
        proba = torch.softmax(explainer.classifier.logits(p.enc).float(), -1)[0, pred]
        (grad,) = torch.autograd.grad(proba, states)
    out = []
    for k in present:
        q = orthonormal_basis(explainer.methods[method][1].directions([k], True))
        change = project_out(states.detach(), q) - states.detach()
        out.append(-float((grad * change).sum()))
    return np.asarray(out)
