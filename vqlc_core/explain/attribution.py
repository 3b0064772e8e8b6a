"""Which words a prediction rests on: token attributions at layer l by Integrated Gradients (or
gradient times input), and the salient words they pick out (the explainer's and the faithfulness
table's).

Integrated Gradients is one batched pass (all steps at once, in chunks that bound memory) that
starts at layer l from the states of the explainer's forward, so blocks 1..l are never re-run.
The path starts at the train rows' mean state (every word token; special tokens and padding keep
their own state) and its integral uses Gauss-Legendre nodes.

Why not the zero baseline: in a pre-norm model (Llama, SmolLM2) all-zero states are a degenerate
point where every RMSNorm outputs 0, so f(0) is the head's bias, while f(a x) keeps its
scale-free value down to a = 1e-8; no quadrature reaches completeness (SmolLM2 layer 29, 40 MR
sentences, 50 nodes: mean error 277%). From the mean state the path is smooth. Mean completeness
error |sum(attr) - (f(x) - f(b))| / |f(x) - f(b)| over MR test sentences: MiniLM, 0.15% at 8
nodes and below 0.01% from 16 on (zero baseline: 27% at 16, 1.7% at 32, 0.15% at 50; a midpoint
Riemann sum 12% at 50); SmolLM2, below 0.01% from 8 nodes on.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np
import torch

from vqlc_core.base.runio import RunError
from vqlc_core.explain.ablation import from_layer
from vqlc_core.explain.settings import IG_STEPS

SALIENT_MASS = 0.5  # salient words: the top words until this share of the total attribution
IG_CHUNK_TOKENS = 32768  # token positions per forward-backward of Integrated Gradients (bounds memory)


def ig_nodes(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre nodes and weights on [0, 1] for Integrated Gradients' path integral
    (captum's default rule): exact for polynomials of degree 2*steps - 1."""
    x, w = np.polynomial.legendre.leggauss(steps)
    return torch.as_tensor((x + 1) / 2, dtype=torch.float32), torch.as_tensor(w / 2, dtype=torch.float32)


@dataclass
class Attribution:
    """Token attributions toward a target logit and the two ends of the path they explain."""

    tokens: torch.Tensor  # (B, T): attribution of each token's layer-l state
    output: np.ndarray  # (B,) f(x): the target logit run on from the states
    baseline: np.ndarray  # (B,) f(b): the target logit run on from the baseline states
    baseline_proba: np.ndarray | None = None  # (B, C) class probabilities run on from the baseline states

    @property
    def completeness_error(self) -> np.ndarray:
        """(B,) |sum of attributions - (f(x) - f(b))| / |f(x) - f(b)|: zero for exact IG."""
        delta = self.output - self.baseline
        total = self.tokens.sum(1).double().numpy()
        return np.abs(total - delta) / np.maximum(np.abs(delta), 1e-12)


def _target_logits(classifier, enc, layer: int, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    with from_layer(classifier.backbone, layer, states):
        logits = classifier.logits(enc)
    return logits[torch.arange(len(logits)), targets.repeat(len(logits) // len(targets))]


def layer_attributions(classifier, enc, layer: int, states: torch.Tensor, targets, steps: int = IG_STEPS,
                       how: str = "ig", chunk_tokens: int = IG_CHUNK_TOKENS,
                       baseline: torch.Tensor | None = None) -> Attribution:
    """Attribution (B, T) of every token's layer-l state to the logit of `targets` (B,), summed
    over the hidden dimension, with f(x) and f(b) for the completeness check.

    how="ig": Integrated Gradients from `baseline` states b (B, T, d; zeros when None) along
    b + a (x - b) with `steps` Gauss-Legendre nodes, the B*steps points run in chunks of at most
    `chunk_tokens` token positions. how="grad_x_input": gradient at x times (x - b)."""
    if how not in ("ig", "grad_x_input"):
        raise RunError(f"Unknown attribution '{how}'; choose 'ig' or 'grad_x_input'.")
    alphas, weights = ig_nodes(steps) if how == "ig" else (torch.ones(1), torch.ones(1))
    states = states.detach()
    base = torch.zeros_like(states) if baseline is None else baseline.detach().to(states.dtype)
    diff = states - base
    B, T, d = states.shape
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.long)
    per_chunk = max(1, chunk_tokens // max(B * T, 1))  # path points per forward-backward
    grad_sum = torch.zeros_like(states, dtype=torch.float32)
    with torch.enable_grad():
        for c in range(0, len(alphas), per_chunk):
            a, w = alphas[c : c + per_chunk], weights[c : c + per_chunk]
            S = len(a)
            x = (base[None] + a[:, None, None, None] * diff[None]).reshape(S * B, T, d).requires_grad_(True)
            rep = {"input_ids": enc["input_ids"].repeat(S, 1), "attention_mask": enc["attention_mask"].repeat(S, 1)}
            chosen = _target_logits(classifier, rep, layer, x, targets).float().sum()  # step-major
            (grad,) = torch.autograd.grad(chosen, x)
            grad_sum += (grad.float().reshape(S, B, T, d) * w[:, None, None, None]).sum(0)
    with torch.no_grad():  # both ends of the path in one forward
        rep = {"input_ids": enc["input_ids"].repeat(2, 1), "attention_mask": enc["attention_mask"].repeat(2, 1)}
        with from_layer(classifier.backbone, layer, torch.cat([states, base])):
            logits = classifier.logits(rep).float()  # (2B, C)
    ends = logits[torch.arange(2 * B), targets.repeat(2)].double().numpy()
    return Attribution((diff.float() * grad_sum).sum(-1), ends[:B], ends[B:], torch.softmax(logits[B:], -1).numpy())


def pooled_positions(pooling: str, attention_mask: torch.Tensor) -> np.ndarray:
    """(B,) the token position the prediction representation is read from: 0 for CLS pooling,
    the last real token for last-token pooling, -1 (none) for mean pooling."""
    B = attention_mask.shape[0]
    if pooling == "cls":
        return np.zeros(B, dtype=np.int64)
    if pooling == "last":
        return (attention_mask.long().sum(1) - 1).numpy()
    return np.full(B, -1, dtype=np.int64)


def _is_punctuation(word: str) -> bool:
    return all(unicodedata.category(c)[0] in "PS" for c in word)


def eligible_words(words, input_ids, special_ids, pooled_position: int = -1) -> np.ndarray:
    """(W,) whether each word of one text may be a salient word: not made of punctuation or
    symbols only, not made of special tokens only (an unknown token), and not holding the
    pooled position (a decoder's last token under last-token pooling: it carries the whole
    prediction representation, so it would top every attribution)."""
    ids = input_ids.tolist() if torch.is_tensor(input_ids) else list(input_ids)
    return np.asarray([not _is_punctuation(w.word) and pooled_position not in w.tokens
                       and not all(ids[t] in special_ids for t in w.tokens) for w in words], dtype=bool)


def word_scores(token_attr: torch.Tensor, words, eligible: np.ndarray | None = None) -> np.ndarray:
    """Per-word attribution of one text: absolute token attribution, max over the word's
    sub-words, normalised to sum 1 over the eligible words (uniform over them when all score 0);
    a word that is not eligible scores 0."""
    if not words:
        return np.zeros(0, dtype=np.float64)
    ok = np.ones(len(words), dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    a = token_attr.abs()
    s = np.asarray([float(a[w.tokens].max()) for w in words], dtype=np.float64) * ok
    total = s.sum()
    if total > 0:
        return s / total
    return ok / ok.sum() if ok.any() else np.zeros(len(words))


def salient_indices(scores: np.ndarray, mass: float = SALIENT_MASS) -> list[int]:
    """The smallest set of words holding `mass` of the attribution: word indices by decreasing
    score (ties: earlier word first) until `mass` is covered; none when every word scores 0."""
    if len(scores) == 0 or scores.sum() <= 0:
        return []
    order = np.argsort(-scores, kind="stable")
    cum = np.cumsum(scores[order])
    n = int(np.searchsorted(cum, mass - 1e-9) + 1)
    return [int(i) for i in order[: min(n, len(order))]]
