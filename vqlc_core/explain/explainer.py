"""Prediction attribution (LACOAT's idea) for one input: the prediction and its confidence, the
concept of every word and of the prediction representation at layer l, the salient words by
Integrated Gradients at layer l (`attribution`), and live ablation of chosen concepts.

One forward gives the layer-l states and the logits, cached per text; Integrated Gradients is one
batched pass from those states, and an ablation one more forward that starts at layer l.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from vqlc_core.data.backbone import aggregate_words, autocast, capture
from vqlc_core.data.settings import AGGREGATIONS
from vqlc_core.data.inputs import check_input
from vqlc_core.methods.calibration import tempered
from vqlc_core.explain.ablation import from_layer, orthonormal_basis, project_out
from vqlc_core.explain.contributions import Removal, contributions as concept_contributions
from vqlc_core.explain.intervention import check_intervention
from vqlc_core.base.runio import RunError
from vqlc_core.explain.attribution import (IG_STEPS, Attribution, eligible_words, layer_attributions, pooled_positions,
                                           salient_indices, word_scores)
from vqlc_core.explain.records import (Ablation, Explanation, MethodExplanation, PredictionConcept, SalientWord, Word,
                                       WordConcept)

TOP_CONCEPTS = 5


def concept_proba(method, X: np.ndarray, concepts=None) -> np.ndarray:
    """(N, K) concept probabilities of prediction representations X (N, d) under a concept
    method, tempered as its concept set's calibration says (`calibration`; none: as they are)."""
    proba = getattr(method, "predict_proba_predictions", None) or method.predict_proba  # a method of one set
    p = np.asarray(proba(np.asarray(X, dtype=np.float32)), dtype=np.float32)
    t = (getattr(concepts, "info", None) or {}).get("calibration", {}).get("temperature", 1.0)
    return tempered(p, float(t))


@dataclass
class _Pass:
    """One forward of one text: its batch, words, layer-l states (1, T, d) and probabilities,
    and its words' concept ids per method once assigned (`Explainer._word_ids`)."""

    enc: dict
    words: list
    states: torch.Tensor
    proba: np.ndarray
    truncated: bool
    word_ids: dict = field(default_factory=dict)


class Explainer:
    """Explains a classifier's predictions through the concepts of several methods.
    `Run.explainer()` gives one with the run's settings.

    Args:
        classifier: the run's classifier (`Run.classifier`), with its backbone.
        layer: the layer the concepts were fitted at.
        methods: name -> (fitted concept method, its ConceptSet), all fitted at `layer`.
        ig_steps: Integrated Gradients' nodes on the path from the baseline.
        cache_size: the explained texts whose forward pass is kept for their ablations.
        autocast_dtype: e.g. `torch.bfloat16` for the forwards (Integrated Gradients stays in
            float32); None: the weights' dtype.
        aggregation: how a word's sub-word states become its vector; must be the store's, so
            that words are assigned concepts on vectors like those the concepts were fitted on.
        ig_baseline: the layer-l state (d,) Integrated Gradients starts from at every word token
            (a run's neutral baseline, named by `ig_baseline_name`); None takes the train rows'
            mean state from the concept sets (zero when none holds one).
        ig_baseline_name: how `ig_baseline` is named in an explanation's `info`.
        contributions: whether each explanation scores the input's word concepts by their
            removal (two more forwards from layer l); off, its records leave them out.
        intervention: where a concept is removed for one input's explanation, its toggles and
            its ranked list: 'local' (at the tokens of the input's words assigned to it, the
            default) or 'global' (at every position, as the faithfulness tables); each call may
            ask for the other.

    Raises:
        RunError: `ig_steps` below 1, an unknown aggregation or intervention, or a layer the
            model lacks.

    Examples:
        >>> explainer = vq.open_run("default").explainer(methods=("vqlc", "kmeans"))
        >>> ex = explainer.explain("a gorgeous, witty and deeply moving film")
        >>> ex.prediction, ex.methods["vqlc"].contributions[0].label
    """

    def __init__(self, classifier, layer: int, methods: dict, ig_steps: int = IG_STEPS, cache_size: int = 16,
                 autocast_dtype=None, aggregation: str = "last", ig_baseline=None, ig_baseline_name: str = "given",
                 contributions: bool = True, intervention: str = "local"):
        if ig_steps < 1:
            raise RunError(f"ig_steps must be at least 1, got {ig_steps}.")
        if aggregation not in AGGREGATIONS:
            raise RunError(f"Unknown aggregation '{aggregation}'; choose one of {', '.join(AGGREGATIONS)}.")
        self.aggregation = aggregation  # sub-word -> word, as the store was extracted
        self.classifier, self.backbone = classifier, classifier.backbone
        self.layer = self.backbone.check_layer(layer)
        self.methods = dict(methods)
        self.ig_steps, self.cache_size = ig_steps, cache_size
        self.contributions = bool(contributions)
        self.intervention = check_intervention(intervention)
        self._cache: OrderedDict[str, _Pass] = OrderedDict()
        self.autocast_dtype = autocast_dtype  # e.g. torch.bfloat16: faster forwards on CPUs with BF16
        if ig_baseline is None:
            means = (getattr(cs, "mean", None) for _, cs in self.methods.values())
            ig_baseline = next((m for m in means if m is not None), None)
            ig_baseline_name = "zero" if ig_baseline is None else "train mean"
        self.ig_baseline_name = ig_baseline_name
        self.ig_baseline = None if ig_baseline is None else torch.as_tensor(np.asarray(ig_baseline, dtype=np.float32))

    # --- forward passes ---------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: the states feed Integrated Gradients afterwards
    def forward(self, enc) -> tuple[torch.Tensor, np.ndarray]:
        """Layer-l states (B, T, d) and class probabilities (B, C) from one forward."""
        with capture(self.backbone, self.layer) as got, autocast(self.autocast_dtype):
            logits = self.classifier.logits(enc)
        return got["h"].float(), torch.softmax(logits.float(), -1).numpy()

    @torch.inference_mode()
    def proba_from_states(self, enc, states: torch.Tensor) -> np.ndarray:
        """Class probabilities (B, C) of the model run on from the given layer-l states."""
        with from_layer(self.backbone, self.layer, states), autocast(self.autocast_dtype):
            return torch.softmax(self.classifier.logits(enc).float(), -1).numpy()

    def baseline_states(self, enc, states: torch.Tensor) -> torch.Tensor | None:
        """(B, T, d) where Integrated Gradients starts: `ig_baseline` at every word token, the
        token's own state at special tokens (BOS, CLS, SEP) and padding, which are no words and
        so get no attribution; None (all zeros) without an `ig_baseline`."""
        if self.ig_baseline is None:
            return None
        special = torch.as_tensor(np.isin(enc["input_ids"].numpy(), list(self.backbone.tokenizer.all_special_ids)))
        keep = special | (enc["attention_mask"] == 0)
        return torch.where(keep[..., None], states, self.ig_baseline.to(states.dtype))

    def attributions(self, enc, states: torch.Tensor, targets, how: str = "ig") -> Attribution:
        """Token attributions (B, T) at layer l toward `targets` from `baseline_states` (see
        `layer_attributions`), computed in float32 (in the weights' dtype where they are half):
        under bf16 autocast the path's gradients and ends are rounded, and on the LoRA `decoder`
        run the completeness error was 3.0% mean, 44% max at 8 nodes against 0.000%, 0.005% in
        float32, at 1.3x the time (bench/ig_precision.py)."""
        base = self.baseline_states(enc, states)
        return layer_attributions(self.classifier, enc, self.layer, states.float(), targets, self.ig_steps, how,
                                  baseline=base)

    def salient(self, enc, states: torch.Tensor, targets, words: list, how: str = "ig"):
        """Per text of a batch: its word scores (see `word_scores`) and its salient words (the
        smallest set holding half the attribution, `salient_indices`), with the Attribution.
        Punctuation, special tokens and the pooled position never count (`eligible_words`)."""
        attr = self.attributions(enc, states, targets, how)
        pos = pooled_positions(self.backbone.pooling, enc["attention_mask"])
        special = set(self.backbone.tokenizer.all_special_ids)
        scores = [word_scores(attr.tokens[b], w, eligible_words(w, enc["input_ids"][b], special, int(pos[b])))
                  for b, w in enumerate(words)]
        return scores, [salient_indices(sc) for sc in scores], attr

    def word_vectors(self, states: torch.Tensor, words) -> np.ndarray:
        """One vector per word (W, d) from one text's layer-l states (T, d), aggregated as the store's."""
        return aggregate_words(states, words, self.aggregation).numpy()

    def is_truncated(self, text: str) -> bool:
        """Whether `text` is longer than the model's `max_length` tokens (its end is not read)."""
        n = len(self.backbone.tokenizer(text, truncation=False)["input_ids"]) + int(self.backbone.add_bos)
        return n > self.backbone.max_length

    def _pass(self, text: str) -> _Pass:
        return self._passes([text])[0]

    def _passes(self, texts: list[str]) -> list[_Pass]:
        """One pass per text: cached ones reused, the others from one padded forward, each cut
        to its own tokens (the batch is right-padded), so a text's pass is the same whether it
        came alone or with others (up to float rounding)."""
        texts = [check_input(t, self.backbone) for t in texts]  # one sentence for what cannot be explained
        got = {t: self._cache[t] for t in texts if t in self._cache}
        todo = [t for t in dict.fromkeys(texts) if t not in got]
        if todo:
            enc, words = self.backbone.tokenize(todo)
            states, proba = self.forward({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
            for i, t in enumerate(todo):
                n = int(enc["attention_mask"][i].sum())
                one = {"input_ids": enc["input_ids"][i : i + 1, :n], "attention_mask": enc["attention_mask"][i : i + 1, :n]}
                got[t] = _Pass(one, words[i], states[i : i + 1, :n], proba[i], self.is_truncated(t))
        for t in texts:
            self._cache[t] = got[t]
            self._cache.move_to_end(t)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return [got[t] for t in texts]

    def _stack(self, passes: list[_Pass], states: list[torch.Tensor] | None = None):
        """The passes as one right-padded batch: (enc, states (B, T, d)); `states` replaces
        the passes' own (e.g. with concepts projected out)."""
        states = [p.states for p in passes] if states is None else states
        if len(passes) == 1:
            return passes[0].enc, states[0]
        pad = self.backbone.tokenizer.pad_token_id or 0
        T, d = max(s.shape[1] for s in states), states[0].shape[-1]
        ids = torch.full((len(passes), T), pad, dtype=passes[0].enc["input_ids"].dtype)
        mask = torch.zeros((len(passes), T), dtype=passes[0].enc["attention_mask"].dtype)
        out = torch.zeros((len(passes), T, d), dtype=states[0].dtype)
        for i, (p, s) in enumerate(zip(passes, states)):
            n = s.shape[1]
            ids[i, :n], mask[i, :n], out[i, :n] = p.enc["input_ids"][0], p.enc["attention_mask"][0], s[0]
        return {"input_ids": ids, "attention_mask": mask}, out

    def _method(self, name: str):
        if name not in self.methods:
            raise RunError(f"Unknown concept method '{name}'; choose one of {', '.join(self.methods) or '(none)'}.")
        return self.methods[name]

    # --- public -------------------------------------------------------------------------------
    def explain(self, text: str, attribute=None, shapley: bool = False, intervention: str | None = None) -> Explanation:
        """Explain one input: the prediction, every word's concept, the prediction
        representation's top concepts and the salient words with their concepts, for each
        method; and the concept attribution (`contributions`), each concept of the input scored
        by its removal. Thread-safe: the hooks it places act on the shared model, so passes are
        serialised by the backbone's lock.

        Args:
            text: the input, a non-empty string (longer than the model reads: its end is cut,
                and the explanation says so in `truncated`).
            attribute: the methods whose concept attribution to compute (default: every method;
                the Explain page asks for one, as the attribution is most of the time).
            shapley: score the concepts by Shapley values of their removals instead of single
                removals.
            intervention: 'local' or 'global' (default: the explainer's); see the class.

        Returns:
            An `Explanation`, with a `MethodExplanation` per method in `methods`.

        Raises:
            RunError: an empty or unreadable text, or an unknown method in `attribute`.

        Examples:
            >>> ex = explainer.explain("a gorgeous, witty and deeply moving film")
            >>> ex.prediction
            'positive'
            >>> [c.label for c in ex.methods["vqlc"].contributions[:2]]
        """
        return self.explain_many([text], None if attribute is None else [attribute], [shapley], [intervention])[0]

    def explain_many(self, texts: list[str], attribute: list | None = None, shapley: list | None = None,
                     intervention: list | None = None) -> list[Explanation]:
        """`explain` for several texts at once: one padded forward, one batched Integrated
        Gradients pass and one concept assignment per method for them all (the server batches
        the requests of sessions that arrive together, `serving.ExplainService`). attribute[b]:
        the methods whose attribution text b gets (None: every method); shapley[b] and
        intervention[b]: how (default: single removals, the explainer's intervention)."""
        n = len(texts)
        attribute = [None] * n if attribute is None else list(attribute)
        shapley = [bool(s) for s in (shapley or [False] * n)]
        intervention = [check_intervention(i, self.intervention) for i in (intervention or [None] * n)]
        for m in {m for a in attribute if a is not None for m in a}:
            self._method(m)  # an unknown name: one sentence
        want = [set(self.methods) if a is None else set(a) for a in attribute]
        with self.backbone.lock:
            return self._explain_many(list(texts), want, shapley, intervention)

    def _word_ids(self, passes: list[_Pass], methods=None) -> dict[str, list[list[int]]]:
        """Per method of `methods` (default: every one), per pass: every word's concept id. A
        pass keeps its ids, so an ablation of an explained text assigns nothing again; the
        others get one assignment per method for them all."""
        out = {}
        for name in self.methods if methods is None else methods:
            todo = list({id(p): p for p in passes if name not in p.word_ids}.values())  # each pass once
            vecs = [self.word_vectors(p.states[0], p.words) for p in todo if p.words]
            ids = [int(k) for k in self.methods[name][0].predict(np.concatenate(vecs))] if vecs else []
            bounds = np.cumsum([0] + [len(p.words) for p in todo])
            for b, p in enumerate(todo):
                p.word_ids[name] = ids[bounds[b] : bounds[b + 1]]
            out[name] = [p.word_ids[name] for p in passes]
        return out

    def _explain_many(self, texts: list[str], want: list[set], shapley: list[bool], intervention: list[str]
                      ) -> list[Explanation]:
        ps = self._passes(texts)
        preds = [int(np.argmax(p.proba)) for p in ps]
        enc, states = self._stack(ps)
        pooled = self.backbone.pool(states, enc["attention_mask"]).numpy()  # (B, d)

        scores, salient, completeness = [np.zeros(0)] * len(ps), [[] for _ in ps], [None] * len(ps)
        worded = [i for i, p in enumerate(ps) if p.words]
        if worded:
            sub_enc, sub_states = (enc, states) if len(worded) == len(ps) else self._stack([ps[i] for i in worded])
            sc, sal, attr = self.salient(sub_enc, sub_states, [preds[i] for i in worded], [ps[i].words for i in worded])
            for j, i in enumerate(worded):
                scores[i], salient[i], completeness[i] = sc[j], sal[j], float(attr.completeness_error[j])

        word_ids = self._word_ids(ps)
        proba = {n: concept_proba(method, pooled, cs) for n, (method, cs) in self.methods.items()}  # (B, K) each
        per_text = [{n: (cs, word_ids[n][b], proba[n][b]) for n, (_, cs) in self.methods.items()}
                    for b in range(len(ps))]
        contrib = (concept_contributions(self, ps, preds, [{n: (cs, ids) for n, (cs, ids, _) in t.items() if n in want[b]}
                                                           for b, t in enumerate(per_text)], intervention, shapley)
                   if self.contributions else [{} for _ in ps])
        return [self._explanation(texts[b], ps[b], preds[b], scores[b], salient[b], completeness[b], per_text[b],
                                  contrib[b], intervention[b], shapley[b]) for b in range(len(ps))]

    def _explanation(self, text: str, p: _Pass, pred: int, scores, salient, completeness, per_method,
                     contrib: dict | None = None, intervention: str = "local", shapley: bool = False) -> Explanation:
        """One text's Explanation from its pass, attributions and per-method concepts."""
        names = self.classifier.class_names
        methods, salient_concepts = {}, {i: {} for i in salient}
        for name, (concepts, ids, proba) in per_method.items():
            top = np.argsort(-proba, kind="stable")[:TOP_CONCEPTS]
            records, curve, joint, share, base = (contrib or {}).get(name, (None,) * 5)
            methods[name] = MethodExplanation(
                word_concepts=ids,
                prediction_concepts=[PredictionConcept(int(k), float(proba[k]), concepts.label(int(k))) for k in top],
                contributions=records, deletion=curve, joint=joint, interaction=share, base=base,
                intervention=intervention if records is not None else None, shapley=shapley and records is not None)
            for i in salient:
                salient_concepts[i][name] = WordConcept(ids[i], concepts.label(ids[i]))

        return Explanation(
            text=text, layer=self.layer, prediction=names[pred], predicted_index=pred,
            confidence=float(p.proba[pred]),
            probabilities={c: float(v) for c, v in zip(names, p.proba)},
            words=[Word(w.word, int(w.start), int(w.end)) for w in p.words],
            attributions=[float(s) for s in scores],
            salient=[SalientWord(i, p.words[i].word, float(scores[i]), salient_concepts[i]) for i in salient],
            methods=methods, truncated=p.truncated,
            info={"ig_steps": self.ig_steps, "ig_rule": "gauss-legendre", "pooling": self.backbone.pooling,
                  "ig_baseline": self.ig_baseline_name,
                  "completeness_error": completeness, "intervention": intervention},
        )

    def ablate(self, text: str, method: str, concept_ids, centred: bool = True, intervention: str | None = None
               ) -> Ablation:
        """Remove concepts from layer l and run the rest of the model: what the Explain page's
        toggles do.

        Args:
            text: the input.
            method: the name of one of the explainer's methods.
            concept_ids: the ids of that method's concepts to remove together.
            centred: remove each concept's vector minus the train mean (the default, see
                `ConceptSet.directions`), or the vector itself.
            intervention: 'local' (default: the explainer's): each concept at the tokens of the
                input's words assigned to it (a concept no word has: where the prediction
                representation is read); 'global': the span at every position.

        Returns:
            An `Ablation`; its `delta` is the new minus the old probability of the originally
            predicted class (negative: the concepts supported it).

        Raises:
            RunError: an unknown method, or concept ids that are not whole numbers or outside
                the method's concepts.

        Examples:
            >>> after = explainer.ablate("a gorgeous, witty film", "vqlc", [193])
            >>> after.prediction, round(after.delta, 3)
        """
        return self.ablate_many([(text, method, concept_ids, centred, intervention)])[0]

    def ablate_many(self, requests: list[tuple]) -> list[Ablation]:
        """`ablate` for several (text, method, concept_ids[, centred[, intervention]]) at once:
        every text's own concepts removed, then one forward from layer l for them all."""
        with self.backbone.lock:
            reqs = [tuple(r) + (True, None)[len(r) - 3:] for r in requests]  # centred, intervention: defaults
            for _, m, ids, centred, how in reqs:
                self._basis(m, ids, centred)  # bad ids: one sentence
                check_intervention(how, self.intervention)
            ps = self._passes([r[0] for r in reqs])
            local = {r[1] for r in reqs if check_intervention(r[4], self.intervention) == "local"}
            word_ids = self._word_ids(ps, local)  # the requested methods only; an explained text's are kept
            states = []
            for b, (p, (_, m, ids, centred, how)) in enumerate(zip(ps, reqs)):
                ids = [int(k) for k in np.atleast_1d(np.asarray(ids, dtype=np.int64))]
                how = check_intervention(how, self.intervention)
                states.append(Removal(self, p, m, word_ids[m][b] if m in word_ids else [], how, centred).states(ids))
            enc, stacked = self._stack(ps, states)
            probas = self.proba_from_states(enc, stacked)
        names, out = self.classifier.class_names, []
        for p, proba in zip(ps, probas):
            pred, new = int(np.argmax(p.proba)), int(np.argmax(proba))
            out.append(Ablation(proba={c: float(v) for c, v in zip(names, proba)}, prediction=names[new],
                                confidence=float(proba[new]), delta=float(proba[pred] - p.proba[pred])))
        return out

    def _basis(self, method: str, concept_ids, centred: bool = True) -> torch.Tensor:
        """Orthonormal basis (m, d) of the concepts' directions; a clear error for bad ids."""
        _, concepts = self._method(method)
        try:
            ids = [int(k) for k in np.atleast_1d(np.asarray(concept_ids, dtype=np.int64))]
        except (TypeError, ValueError):
            raise RunError(f"Concept ids must be whole numbers, got {concept_ids!r}.") from None
        bad = [k for k in ids if not 0 <= k < concepts.n_concepts]
        if bad:
            raise RunError(f"Concept ids {bad} are outside {method}'s concepts 0..{concepts.n_concepts - 1}.")
        return orthonormal_basis(concepts.directions(ids, centred)) if ids else torch.zeros(0, concepts.vectors.shape[1])
