"""What the judges rate: dev sentences sampled by stratum (true/false positives and negatives),
each explained by the run's explainer, with every method's concept for the prediction
representation and for the most salient word shown under neutral letters in a seeded shuffled
order. The items are kept under `<run>/llm/items/` (`judged_items`), so a rerun does not explain
the sentences again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import string
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from vqlc_core.base.runio import RunError, read_json, write_json
from vqlc_core.llm.runfacts import check_methods, llm_dir
from vqlc_core.llm.settings import N_JUDGED
from vqlc_core.methods.concepts import is_prediction_concept, prediction_examples

log = logging.getLogger(__name__)

ROLES = ("prediction", "salient")  # the concept of the prediction representation, of the most salient word
N_WORDS = 10  # a concept is shown by its most frequent words ...
N_SENTENCES = 5  # ... or, when it holds mostly prediction rows, by example sentences of
SENTENCE_WORDS = (5, 30)  # 5 to 30 words


# --- sampling ---------------------------------------------------------------------------------

def strata(labels: np.ndarray, predictions: np.ndarray, class_names: list[str]) -> np.ndarray:
    """Each sentence's stratum: TP/FP/TN/FN for two classes (the second class is the positive
    one), '<true class>: correct|wrong' for more."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if len(class_names) == 2:
        names = {(1, 1): "TP", (0, 1): "FP", (0, 0): "TN", (1, 0): "FN"}
        return np.asarray([names[(int(t), int(p))] for t, p in zip(labels, predictions)])
    return np.asarray([f"{class_names[int(t)]}: {'correct' if t == p else 'wrong'}"
                       for t, p in zip(labels, predictions)])


def stratified_sample(stratum: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of `n` rows (all when fewer) spread as evenly as possible over the strata: one
    row per stratum in turn, a stratum that runs out leaving its share to the others; seeded."""
    rng = np.random.default_rng(seed)
    stratum = np.asarray(stratum)
    groups = {s: rng.permutation(np.flatnonzero(stratum == s)) for s in sorted(set(stratum.tolist()))}
    take = dict.fromkeys(groups, 0)
    left = min(int(n), len(stratum))
    while left:
        for s in groups:
            if left and take[s] < len(groups[s]):
                take[s] += 1
                left -= 1
    picked = [groups[s][: take[s]] for s in groups]
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


# --- what the judge sees -------------------------------------------------------------------

def cut(text: str, n_words: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= n_words else " ".join(words[:n_words]) + " …"


def concept_view(concepts, texts: pd.DataFrame, k: int) -> str:
    """Concept k as the judge sees it: its 10 most frequent words, or, when most of its members
    are prediction rows (special tokens), up to 5 of its sentences of 5 to 30 words."""

    row = concepts.summary.loc[k]
    words = [w for w, _ in concepts.top_words(k, N_WORDS)]
    if is_prediction_concept(row) or not words:
        sentences = prediction_examples(texts, row, n=12)
        fit = [s for s in sentences if SENTENCE_WORDS[0] <= len(s.split()) <= SENTENCE_WORDS[1]]
        shown = (fit or [cut(s, SENTENCE_WORDS[1]) for s in sentences])[:N_SENTENCES]
        if shown:
            return "sentences: " + " / ".join(f'"{s}"' for s in shown)
    return "words: " + (", ".join(words) if words else "(none)")


@dataclass
class Shown:
    """One concept shown to the judge for one sentence."""

    letter: str
    method: str
    role: str  # see ROLES
    concept: int
    view: str
    word: str | None = None  # the salient word, for the salient role


@dataclass
class JudgeItem:
    """One dev sentence with the concepts every method puts forward for it."""

    text_id: int
    text: str
    label: str
    prediction: str
    confidence: float
    stratum: str
    shown: list[Shown] = field(default_factory=list)

    @property
    def letters(self) -> list[str]:
        return [s.letter for s in self.shown]


def _item(explanation, text_id: int, label: str, stratum: str, methods: list[str], views, seed: int) -> JudgeItem:
    ex = explanation
    entries = []
    for m in methods:
        k = ex.methods[m].prediction_concepts[0].concept
        entries.append((m, "prediction", k, None))
        if ex.salient:  # the most salient word (salient words come by decreasing attribution)
            entries.append((m, "salient", ex.salient[0].concepts[m].concept, ex.salient[0].word))
    order = np.random.default_rng([seed, int(text_id)]).permutation(len(entries))  # neutral, shuffled letters
    shown = [Shown(string.ascii_uppercase[i], *entries[j][:3], views(entries[j][0], entries[j][2]), entries[j][3])
             for i, j in enumerate(order)]
    return JudgeItem(int(text_id), ex.text, label, ex.prediction, float(ex.confidence), stratum, shown)


def _predictions(run, texts: list[str], batch_size: int = 32) -> np.ndarray:
    out = [run.classifier.predict_proba(texts[i : i + batch_size]).argmax(1) for i in range(0, len(texts), batch_size)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def make_items(run, n: int = N_JUDGED, seed: int = 0, methods: list[str] | None = None) -> list[JudgeItem]:
    """`n` dev sentences of `run`, stratified by TP/FP/TN/FN (seeded), each explained by the
    run's explainer with every method in `methods` (default: every built method)."""
    from tqdm.auto import tqdm

    methods = check_methods(run, methods)
    texts = run.texts
    dev = texts[texts["split"] == "dev"].reset_index(drop=True)
    if dev.empty:
        raise RunError(f"Run '{run.dir.name}' has no dev sentences to judge; build it with a dev split.")
    names = run.class_names
    preds = _predictions(run, dev["text"].tolist())
    stratum = strata(dev["label"].to_numpy(), preds, names)
    picked = stratified_sample(stratum, n, seed)
    sets = {m: run.concept_set(m) for m in methods}
    cache: dict = {}

    def views(m: str, k: int) -> str:
        if (m, k) not in cache:
            cache[(m, k)] = concept_view(sets[m], texts, k)
        return cache[(m, k)]

    explainer = run.explainer({m: (run.method(m), sets[m]) for m in methods})
    items = []
    for i in tqdm(picked, desc="explaining dev sentences", unit="text", leave=False):
        row = dev.iloc[int(i)]
        ex = explainer.explain(row["text"])
        items.append(_item(ex, int(row["text_id"]), names[int(row["label"])], str(stratum[i]), methods, views, seed))
    return items


ITEMS_FORMAT = 1  # bump when an item's content changes for the same run and settings


def items_path(run, n: int, seed: int, methods: list[str]) -> Path:
    """Where the judged items of these settings are kept: named by a digest of the settings and
    of the run's finished stages (a rebuilt stage makes other items)."""
    stages = run.manifest.data.get("stages", {})
    key = json.dumps({"format": ITEMS_FORMAT, "n": n, "seed": seed, "methods": methods, "stages": stages},
                     sort_keys=True, default=str)
    return llm_dir(run) / "items" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def judged_items(run, n: int = N_JUDGED, seed: int = 0, methods: list[str] | None = None) -> list[JudgeItem]:
    """`make_items`, kept in the run (`items_path`): a rerun with the same settings on the same
    build reads them instead of explaining every sentence again."""
    methods = check_methods(run, methods)
    path = items_path(run, n, seed, methods)
    if path.exists():
        try:
            return [JudgeItem(**{**d, "shown": [Shown(**s) for s in d["shown"]]}) for d in read_json(path)]
        except (ValueError, TypeError, KeyError):
            log.info("vqlc: judge: the kept items in %s cannot be read; explaining again.", path)
    items = make_items(run, n, seed, methods)
    write_json(path, [asdict(it) for it in items])
    return items
