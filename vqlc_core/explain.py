"""Prediction attribution (LACOAT's idea) for one input: the prediction and its confidence, the
concept of every word and of the prediction representation at layer l, the salient words by
Integrated Gradients at layer l, and live ablation of chosen concepts.

One forward gives the layer-l states and the logits; Integrated Gradients is one batched pass
(all steps at once) that starts at layer l, so blocks 1..l are never re-run.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .ablation import from_layer, orthonormal_basis, project_out
from .backbone import AGGREGATIONS, _autocast, aggregate_words, capture

SALIENT_MASS = 0.5  # salient words: the top words until this share of the total attribution
TOP_CONCEPTS = 5


# --- small helpers ---------------------------------------------------------------------------

def concept_proba(method, X: np.ndarray) -> np.ndarray:
    """(N, K) concept probabilities of raw layer-l vectors X (N, d) under a concept method."""
    return np.asarray(method.predict_proba(np.asarray(X, dtype=np.float32)), dtype=np.float32)


def layer_attributions(classifier, enc, layer: int, states: torch.Tensor, targets, steps: int = 8,
                       how: str = "ig") -> torch.Tensor:
    """Attribution (B, T) of every token's layer-l state to the logit of `targets` (B,), summed
    over the hidden dimension.

    how="ig": Integrated Gradients from a zero baseline, midpoint Riemann sum of `steps` points,
    all steps in one batch of B*steps sequences. how="grad_x_input": gradient times state (one
    point, alpha = 1)."""
    if how not in ("ig", "grad_x_input"):
        raise ValueError(f"Unknown attribution '{how}'; choose 'ig' or 'grad_x_input'.")
    alphas = (torch.arange(steps, dtype=torch.float32) + 0.5) / steps if how == "ig" else torch.ones(1)
    S, (B, T, d) = len(alphas), states.shape
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.long)
    x = (alphas[:, None, None, None] * states.detach()[None]).reshape(S * B, T, d).requires_grad_(True)
    rep = {"input_ids": enc["input_ids"].repeat(S, 1), "attention_mask": enc["attention_mask"].repeat(S, 1)}
    with torch.enable_grad(), from_layer(classifier.backbone, layer, x):
        logits = classifier.logits(rep)  # (S*B, C), step-major
        chosen = logits[torch.arange(S * B), targets.repeat(S)].sum()
        (grad,) = torch.autograd.grad(chosen, x)
    mean_grad = grad.reshape(S, B, T, d).mean(0)
    return (states.detach() * mean_grad).sum(-1)  # (B, T)


def word_scores(token_attr: torch.Tensor, words) -> np.ndarray:
    """Per-word attribution of one text: absolute token attribution, max over the word's
    sub-words, normalised to sum 1 (uniform when every word scores 0)."""
    if not words:
        return np.zeros(0, dtype=np.float64)
    a = token_attr.abs()
    s = np.asarray([float(a[w.tokens].max()) for w in words], dtype=np.float64)
    total = s.sum()
    return s / total if total > 0 else np.full(len(words), 1.0 / len(words))


def salient_indices(scores: np.ndarray, mass: float = SALIENT_MASS) -> list[int]:
    """Word indices by decreasing score (ties: earlier word first) until `mass` is covered."""
    order = np.argsort(-scores, kind="stable")
    cum = np.cumsum(scores[order])
    n = int(np.searchsorted(cum, mass - 1e-9) + 1) if len(order) else 0
    return [int(i) for i in order[: min(n, len(order))]]


# --- the explanation -------------------------------------------------------------------------

@dataclass
class Explanation:
    """Everything the Explain page shows for one input; `to_dict()` is plain JSON."""

    text: str
    layer: int
    prediction: str  # class name
    predicted_index: int
    confidence: float
    probabilities: dict[str, float]
    words: list[dict]  # {"word", "start", "end"} (character spans in `text`)
    attributions: list[float]  # per word, normalised to sum 1
    salient: list[dict]  # {"index", "word", "attribution", "concepts": {method: {"concept", "label"}}}
    methods: dict[str, dict]  # method -> {"word_concepts": [...], "prediction_concepts": [{"concept", "probability", "label"}]}
    truncated: bool = False
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Pass:
    """One forward of one text: its batch, words, layer-l states (1, T, d) and probabilities."""

    enc: dict
    words: list
    states: torch.Tensor
    proba: np.ndarray
    truncated: bool


class Explainer:
    """Explains a classifier's predictions through the concepts of several methods.

    methods: name -> (fitted concept method, its ConceptSet), all fitted at `layer`.
    aggregation: how a word's sub-word states become its vector; must be the store's, so that
        words are assigned concepts on vectors like those the concepts were fitted on."""

    def __init__(self, classifier, layer: int, methods: dict, ig_steps: int = 8, cache_size: int = 16,
                 autocast_dtype=None, aggregation: str = "last"):
        if ig_steps < 1:
            raise ValueError(f"ig_steps must be at least 1, got {ig_steps}.")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"Unknown aggregation '{aggregation}'; choose one of {', '.join(AGGREGATIONS)}.")
        self.aggregation = aggregation  # sub-word -> word, as the store was extracted
        self.classifier, self.backbone = classifier, classifier.backbone
        self.layer = self.backbone.check_layer(layer)
        self.methods = dict(methods)
        self.ig_steps, self.cache_size = ig_steps, cache_size
        self._cache: OrderedDict[str, _Pass] = OrderedDict()
        self.autocast_dtype = autocast_dtype  # e.g. torch.bfloat16: faster forwards on CPUs with BF16

    # --- forward passes ---------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: the states feed Integrated Gradients afterwards
    def forward(self, enc) -> tuple[torch.Tensor, np.ndarray]:
        """Layer-l states (B, T, d) and class probabilities (B, C) from one forward."""
        with capture(self.backbone, self.layer) as got, _autocast(self.autocast_dtype):
            logits = self.classifier.logits(enc)
        return got["h"].float(), torch.softmax(logits.float(), -1).numpy()

    @torch.inference_mode()
    def proba_from_states(self, enc, states: torch.Tensor) -> np.ndarray:
        """Class probabilities (B, C) of the model run on from the given layer-l states."""
        with from_layer(self.backbone, self.layer, states), _autocast(self.autocast_dtype):
            return torch.softmax(self.classifier.logits(enc).float(), -1).numpy()

    def attributions(self, enc, states: torch.Tensor, targets, how: str = "ig") -> torch.Tensor:
        """Token attributions (B, T) at layer l toward `targets` (see `layer_attributions`)."""
        with _autocast(self.autocast_dtype):
            return layer_attributions(self.classifier, enc, self.layer, states, targets, self.ig_steps, how)

    def word_vectors(self, states: torch.Tensor, words) -> np.ndarray:
        """One vector per word (W, d) from one text's layer-l states (T, d), aggregated as the store's."""
        return aggregate_words(states, words, self.aggregation).numpy()

    def is_truncated(self, text: str) -> bool:
        n = len(self.backbone.tokenizer(text, truncation=False)["input_ids"]) + int(self.backbone.add_bos)
        return n > self.backbone.max_length

    def _pass(self, text: str) -> _Pass:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("The input is empty: type a sentence to explain.")
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        enc, words = self.backbone.tokenize([text])
        enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        states, proba = self.forward(enc)
        p = _Pass(enc, words[0], states, proba[0], self.is_truncated(text))
        self._cache[text] = p
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return p

    def _method(self, name: str):
        if name not in self.methods:
            raise ValueError(f"Unknown concept method '{name}'; choose one of {', '.join(self.methods) or '(none)'}.")
        return self.methods[name]

    # --- public -------------------------------------------------------------------------------
    def explain(self, text: str) -> Explanation:
        """The prediction, every word's concept, the prediction representation's top concepts
        and the salient words with their concepts, for each method. Thread-safe: the hooks it
        places act on the shared model, so passes are serialised by the backbone's lock."""
        with self.backbone.lock:
            return self._explain(text)

    def _explain(self, text: str) -> Explanation:
        p = self._pass(text)
        pred = int(np.argmax(p.proba))
        names = self.classifier.class_names
        h = p.states[0]  # (T, d)
        word_vecs = self.word_vectors(h, p.words)
        pooled = self.backbone.pool(p.states, p.enc["attention_mask"]).numpy()  # (1, d)

        scores = np.zeros(0)
        if p.words:
            attr = self.attributions(p.enc, p.states, [pred])
            scores = word_scores(attr[0], p.words)
        salient = salient_indices(scores)

        methods, salient_concepts = {}, {i: {} for i in salient}
        for name, (method, concepts) in self.methods.items():
            ids = [int(k) for k in method.predict(word_vecs)] if p.words else []
            proba = concept_proba(method, pooled)[0]
            top = np.argsort(-proba, kind="stable")[:TOP_CONCEPTS]
            methods[name] = {
                "word_concepts": ids,
                "prediction_concepts": [{"concept": int(k), "probability": float(proba[k]), "label": concepts.label(int(k))}
                                        for k in top],
            }
            for i in salient:
                salient_concepts[i][name] = {"concept": ids[i], "label": concepts.label(ids[i])}

        return Explanation(
            text=text, layer=self.layer, prediction=names[pred], predicted_index=pred,
            confidence=float(p.proba[pred]),
            probabilities={c: float(v) for c, v in zip(names, p.proba)},
            words=[{"word": w.word, "start": int(w.start), "end": int(w.end)} for w in p.words],
            attributions=[float(s) for s in scores],
            salient=[{"index": i, "word": p.words[i].word, "attribution": float(scores[i]), "concepts": salient_concepts[i]}
                     for i in salient],
            methods=methods, truncated=p.truncated,
            info={"ig_steps": self.ig_steps, "pooling": self.backbone.pooling},
        )

    def ablate_concepts(self, text: str, method: str, concept_ids) -> dict:
        """Project the hidden-space vectors of `concept_ids` (of `method`'s concept set) out of
        layer l and run the rest of the model. delta = new minus old probability of the
        originally predicted class (negative: the concepts supported the prediction)."""
        with self.backbone.lock:
            return self._ablate_concepts(text, method, concept_ids)

    def _ablate_concepts(self, text: str, method: str, concept_ids) -> dict:
        _, concepts = self._method(method)
        try:
            ids = [int(k) for k in np.atleast_1d(np.asarray(concept_ids, dtype=np.int64))]
        except (TypeError, ValueError):
            raise ValueError(f"Concept ids must be whole numbers, got {concept_ids!r}.") from None
        bad = [k for k in ids if not 0 <= k < concepts.n_concepts]
        if bad:
            raise ValueError(f"Concept ids {bad} are outside {method}'s concepts 0..{concepts.n_concepts - 1}.")
        p = self._pass(text)
        pred = int(np.argmax(p.proba))
        basis = orthonormal_basis(concepts.vectors[ids]) if ids else torch.zeros(0, p.states.shape[-1])
        proba = self.proba_from_states(p.enc, project_out(p.states, basis))[0]
        new = int(np.argmax(proba))
        return {"proba": {c: float(v) for c, v in zip(self.classifier.class_names, proba)},
                "prediction": self.classifier.class_names[new], "confidence": float(proba[new]),
                "delta": float(proba[pred] - p.proba[pred])}
