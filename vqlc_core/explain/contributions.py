"""The concept attribution of a prediction: every word concept present in the input (the distinct
concepts of its words) scored by the exact effect of removing it on the predicted class's
probability,

    score_k = p_pred(x) - p_pred(x with concept k removed),

where "removed" is the explanation's intervention (`intervention`): by default k's centred
direction projected out only at the tokens of the input's words assigned to k (local), or at
every position (global, the faithfulness tables'). It is what the page's Ablate toggle for k does
under the same intervention, so the list and the toggle agree by construction. Positive: the
concept supports the predicted class. The prediction concept is no part of the input and is not
in the list; the page shows it on its own.

Because the score is itself an intervention, what is left to say is how far the single effects
add up: the base p_pred with every word concept removed together, the joint effect J = p(x) - base,
and the interaction J - sum_k s_k, so base + sum_k s_k + interaction = p(x) exactly (the
waterfall). The interaction share |J - sum_k s_k| / (|J| + sum_k |s_k|) is 0 when the effects add
up and at most 1. With `shapley`, the Shapley values of the same game (`shapley.py`) replace the
single effects: they add up to J by construction. And the deletion curve: p_pred as the top-1,
top-2, ... concepts are removed together, whose area over the curve is ERASER's AOPC.

All singles and the joint removal of every text and method are one batched forward from layer l,
the deletion prefixes one more (and the Shapley coalitions, when asked, one more).
"""

from __future__ import annotations

import numpy as np
import torch

from vqlc_core.explain import shapley as shap
from vqlc_core.explain.ablation import from_layer, project_out
from vqlc_core.explain.attribution import pooled_positions
from vqlc_core.explain.intervention import concept_positions, remove_locally
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


class Removal:
    """What removing concepts from one pass means for one method: the words' concept ids, the
    pooled position, and the intervention ('local' or 'global'); `states(ids)` gives the pass's
    layer-l states with concepts `ids` removed."""

    def __init__(self, explainer, p, method: str, word_ids, intervention: str, centred: bool = True):
        self.explainer, self.p, self.method, self.intervention = explainer, p, method, intervention
        self.centred = centred
        self.word_ids = [int(k) for k in word_ids]
        mask = p.enc["attention_mask"]
        self.pooled = int(pooled_positions(explainer.backbone.pooling, mask)[0])
        self._dirs: dict[int, np.ndarray] = {}

    def _direction(self, k: int) -> np.ndarray:
        if k not in self._dirs:
            self._dirs[k] = self.explainer.methods[self.method][1].directions([k], self.centred)[0]
        return self._dirs[k]

    def positions(self, k: int) -> list[int]:
        """Token positions where concept k is removed locally (`concept_positions`)."""
        return concept_positions(self.p.words, self.word_ids, k, self.pooled, self.p.states.shape[1])

    def states(self, ids) -> torch.Tensor:
        ids = [int(k) for k in ids]
        if self.intervention == "global":
            return project_out(self.p.states, self.explainer._basis(self.method, ids, self.centred))
        return remove_locally(self.p.states, {k: self.positions(k) for k in ids},
                              {k: self._direction(k) for k in ids}, ids)


def removal_proba(explainer, removals: list[Removal], ids: list, chunk: int = 256) -> np.ndarray:
    """(R, C) class probabilities with concepts `ids[r]` removed as `removals[r]` says, run on
    from layer l in batched forwards of at most `chunk` texts (the caller holds the backbone's
    lock)."""
    n_classes = len(explainer.classifier.class_names)
    if not removals:
        return np.zeros((0, n_classes), dtype=np.float32)
    out = []
    for s in range(0, len(removals), chunk):
        part = list(zip(removals[s : s + chunk], ids[s : s + chunk]))
        enc, states = explainer._stack([r.p for r, _ in part], [r.states(k) for r, k in part])
        out.append(explainer.proba_from_states(enc, states))
    return np.concatenate(out)


def prefix_ids(ranked: list[int]) -> list[list[int]]:
    """The deletion prefixes of a ranking: the top 1, top 2, ..., all of it."""
    return [ranked[: n + 1] for n in range(len(ranked))]


def _shapley_scores(explainer, removal: Removal, present: list[int], p0: float, pred: int, seed: int):
    """Shapley values and standard errors of the `present` concepts (see `shapley.py`)."""
    coalitions, orders = shap.coalitions_for(len(present), seed)
    proba = removal_proba(explainer, [removal] * len(coalitions), [[present[i] for i in c] for c in coalitions])
    value = {c: p0 - float(pr[pred]) for c, pr in zip(coalitions, proba)}
    return shap.shapley(len(present), value, orders)


def contributions(explainer, passes, preds: list[int], per_text: list[dict], intervention: list[str] | None = None,
                  shapley: list[bool] | None = None) -> list[dict]:
    """Per text, per method: (records ranked by score, deletion curve, joint drop, interaction
    share, base). per_text[b] maps a method to (its ConceptSet, the words' concept ids);
    intervention[b] and shapley[b] say how text b's concepts are removed and scored (default:
    'local', single effects)."""
    names = explainer.classifier.class_names
    intervention = intervention or ["local"] * len(passes)
    shapley = shapley or [False] * len(passes)
    removals, asks, where = [], [], []  # where: (b, method, concepts present, their Removal)
    for b, methods in enumerate(per_text):
        for m, entry in methods.items():
            cs, ids = entry[0], entry[1]
            present = present_concepts(ids, None)
            rem = Removal(explainer, passes[b], m, ids, intervention[b])
            where.append((b, m, present, rem))
            ks = [k for k, _, _ in present]
            removals += [rem] * (len(ks) + 1)
            asks += [[k] for k in ks] + [ks]
    first = removal_proba(explainer, removals, asks)
    out: list[dict] = [{} for _ in per_text]
    rem2, ids2, ranked_of, pos = [], [], {}, 0
    for b, m, present, rem in where:
        n = len(present)
        single, joint = first[pos : pos + n], first[pos + n]
        pos += n + 1
        p0, pred = float(passes[b].proba[preds[b]]), preds[b]
        scores, stderr = p0 - single[:, pred].astype(np.float64), np.zeros(n)
        if shapley[b] and n:
            scores, stderr = _shapley_scores(explainer, rem, [k for k, _, _ in present], p0, pred, seed=b)
        order = np.argsort(-scores, kind="stable")
        cs = per_text[b][m][0]
        records = [ConceptContribution(int(present[i][0]), cs.label(int(present[i][0])), float(scores[i]),
                                       float(single[i, pred]), names[int(np.argmax(single[i]))],
                                       list(present[i][1]), present[i][2], float(stderr[i])) for i in order]
        base = float(joint[pred]) if n else p0
        ranked_of[(b, m)] = (records, p0 - base, interaction_share(p0 - base, scores), base)
        for ids in prefix_ids([r.concept for r in records])[:-1]:
            rem2.append(rem)
            ids2.append(ids)
    middle = removal_proba(explainer, rem2, ids2)
    pos = 0
    for b, m, present, rem in where:
        records, joint, share, base = ranked_of[(b, m)]
        n = len(records)
        curve = [float(x) for x in middle[pos : pos + max(n - 1, 0), preds[b]]] + ([base] if n else [])
        pos += max(n - 1, 0)
        out[b][m] = (records, curve, joint, share, base)
    return out


def word_order_scores(word_ids: list[int], present: list[int], word_scores) -> np.ndarray:
    """Per concept of `present`: the sum of the word scores (e.g. Integrated Gradients) of the
    words assigned to it (0 for a concept no word has, e.g. the prediction concept alone)."""
    w = np.asarray(word_scores, dtype=np.float64)
    ids = np.asarray(word_ids)
    return np.asarray([w[ids == k].sum() if len(w) else 0.0 for k in present])


def patching_scores(explainer, p, pred: int, method: str, present: list[int], removal: Removal | None = None) -> np.ndarray:
    """Attribution patching (AtP) of each concept's single removal: the gradient of p_pred with
    respect to the layer-l states (one backward), dotted with the change the removal makes
    (`removal`'s intervention; None: global), summed over positions; with the sign of the score
    (p_pred before minus after)."""

    states = p.states.detach().float().clone().requires_grad_(True)
    with torch.enable_grad(), from_layer(explainer.backbone, explainer.layer, states):
        proba = torch.softmax(explainer.classifier.logits(p.enc).float(), -1)[0, pred]
        (grad,) = torch.autograd.grad(proba, states)
    removal = removal or Removal(explainer, p, method, [], "global")
    return np.asarray([-float((grad * (removal.states([k]).float() - states.detach())).sum()) for k in present])
