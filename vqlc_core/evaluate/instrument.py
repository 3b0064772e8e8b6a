"""Measures that can tell a concept from an energy cut where the plain ablation cannot: each
compares a method's prediction concept with the same energy-matched controls as
`faithfulness` (its matched other concept, its matched N(0, Σ) direction, picked by the same
random streams, so α = 1 at every position is exactly the faithfulness table's ablation).

- dose–response: project out a fraction α of the component, h' = h − α (h Qᵀ) Q, for α in
  `ALPHAS`, and record the confidence drop with the energy removed from the pooled
  representation and from every token of the text (`energy_all`);
- pooled position only: the same cut applied only at the token the prediction is read from
  (the last token of a decoder, CLS), against every position; none for mean pooling, where the
  pooled representation is every position's;
- probe: a logistic regression fitted on the layer's pooled train states and their labels
  (as the authors' code measures information removal) reads the projected pooled state; the
  drop of its probability for the model's predicted class and whether its answer changes;
- ERASER comprehensiveness and sufficiency (DeYoung et al. 2020): re-score the text with a
  rationale's words removed (comprehensiveness, p − p(x∖r)) or with only them kept
  (sufficiency, p − p(r)), for the Integrated Gradients salient words and, per method, the
  sentence's words that share a concept with a salient word, each against as many random
  words of the same sentence.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from tqdm.auto import tqdm

from vqlc_core.base.stats import N_BOOT
from vqlc_core.evaluate.controls import direction_bank, matched_basis, prediction_pool, unit_energy
from vqlc_core.evaluate.faithfulness import (MATCHED, PREDICTION, concept_arrays, group_rng, paired_rows, stack_bases,
                                             text_rng)
from vqlc_core.explain.ablation import orthonormal_basis, project_out
from vqlc_core.explain.attribution import pooled_positions

ALPHAS = (0.25, 0.5, 0.75, 1.0)
EVERY, POOLED = "every position", "pooled position"
DOSE, PROBE, COMPREHENSIVENESS, SUFFICIENCY = "dose", "probe", "comprehensiveness", "sufficiency"
MEASURES = (DOSE, PROBE, COMPREHENSIVENESS, SUFFICIENCY)
CUT_TARGETS = (PREDICTION, *MATCHED[PREDICTION])  # the prediction concept and its two matched controls
SALIENT_WORDS, CONCEPT_WORDS = "salient words", "concept words"
RANDOM_WORDS = {SALIENT_WORDS: "random words (as many as salient)", CONCEPT_WORDS: "random words (as many as concept)"}
ATTRIBUTION = "attribution"  # the method name of the rows of the salient words, shared by every method
COLUMNS = ["measure", "position", "alpha", "method", "target", "text_index", "predicted", "conf_drop", "flipped",
           "energy", "energy_all", "n_words"]
DESCRIPTIONS = {
    DOSE: "the confidence drop when a fraction α of the component is projected out at layer l",
    PROBE: "the drop of a linear probe's probability for the predicted class, read from the projected pooled state",
    COMPREHENSIVENESS: "the confidence drop when the rationale's words are removed from the text (higher: the words mattered)",
    SUFFICIENCY: "the confidence drop when only the rationale's words are kept (lower: the words suffice)",
}


def scaled_cut(states: torch.Tensor, bases: torch.Tensor, alpha: float, where: torch.Tensor | None = None) -> torch.Tensor:
    """states (B, T, d) with a fraction `alpha` of their component along each example's span
    (bases (B, r, d)) removed, at every position or only where `where` (B, T) is true."""
    cut = states - project_out(states, bases)
    if where is not None:
        cut = cut * where[..., None].to(cut.dtype)
    return states - alpha * cut


def energy_share(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor | None = None) -> np.ndarray:
    """(B,) share of ||before||² that `after` no longer has: over the last axis for (B, d), and
    summed over the real tokens (mask (B, T)) for (B, T, d)."""
    e0, e1 = (before.double() ** 2).sum(-1), (after.double() ** 2).sum(-1)
    if before.ndim == 3:
        m = mask.double()
        e0, e1 = (e0 * m).sum(1), (e1 * m).sum(1)
    return (1.0 - e1 / e0.clamp(min=1e-30)).numpy()


def fit_probe(store, seed: int = 0, max_rows: int = 20000) -> LogisticRegression:
    """A logistic regression on the store's pooled train states (its train prediction rows) and
    their labels, fitted once per run: the probe of `instrument`."""
    rows = store.rows_where("train", "pred")
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(rows, max_rows, replace=False))
    x = store.read(rows).astype(np.float32)
    y = store.tokens["label"].to_numpy()[rows]
    return LogisticRegression(max_iter=2000, C=1.0, random_state=seed).fit(x, y)


def prediction_bases(explainer, pooled: torch.Tensor, text_index: list[int], seed: int,
                     bank: np.ndarray | None) -> dict[str, dict[str, list[torch.Tensor]]]:
    """Per method, per target of `CUT_TARGETS`: each text's basis (r, d). The same choices as
    `faithfulness` (the same random stream per (seed, method, sentence), drawn in its order)."""
    hp = pooled.double().numpy()
    out = {}
    for name, (method, cs) in explainer.methods.items():
        k_pred = (getattr(method, "predict_predictions", None) or method.predict)(pooled.numpy())
        c = concept_arrays(cs)
        got = {t: [] for t in CUT_TARGETS}
        for b in range(len(hp)):
            k = int(k_pred[b])
            rng = text_rng(seed, name + ":matched", text_index[b])
            target = orthonormal_basis(c["dirs"][[k]])
            got[CUT_TARGETS[0]].append(target)
            got[CUT_TARGETS[1]].append(matched_basis(hp[b], c["unit"], prediction_pool(c, k), None, rng,
                                                     unit_energy(hp[b], c["unit"]), target))
            if bank is not None:
                got[CUT_TARGETS[2]].append(matched_basis(hp[b], bank, np.ones(len(bank), bool), None, rng,
                                                         unit_energy(hp[b], bank), target))
        out[name] = {t: v for t, v in got.items() if v}
    return out


def _without(text: str, words, drop: set[int]) -> str:
    """`text` with the character spans of the words `drop` removed (unchanged when none is)."""
    if not drop:
        return text
    keep, at = [], 0
    for i in sorted(drop):
        keep.append(text[at:words[i].start])
        at = words[i].end
    keep.append(text[at:])
    return " ".join("".join(keep).split())


def _only(words, kept: set[int]) -> str:
    return " ".join(words[i].word for i in sorted(kept))


def rationales(explainer, states: torch.Tensor, words: list, salient: list, text_index: list[int],
               seed: int) -> list[tuple[str, str, int, set[int]]]:
    """(method, rationale, batch position, word indices): per text the salient words (method
    `ATTRIBUTION`), per method the words sharing a concept with a salient word, and for each a
    seeded draw of as many random words of the sentence."""
    out = []
    for b, sal in enumerate(salient):
        if not sal:
            continue
        n = len(words[b])
        picks = [(ATTRIBUTION, SALIENT_WORDS, set(sal))]
        vec = explainer.word_vectors(states[b], words[b])
        for name, (method, _) in explainer.methods.items():
            ids = np.asarray(method.predict(vec))
            picks.append((name, CONCEPT_WORDS, set(np.flatnonzero(np.isin(ids, ids[list(sal)])).tolist())))
        for method, kind, chosen in picks:
            out.append((method, kind, b, chosen))
            rng = text_rng(seed, method + ":" + kind, text_index[b])
            out.append((method, RANDOM_WORDS[kind], b, set(rng.choice(n, size=len(chosen), replace=False).tolist())))
    return out


def instrument(explainer, texts: list[str], probe: LogisticRegression | None = None, seed: int = 0,
               cov: np.ndarray | None = None, alphas=ALPHAS, eraser: bool = True, batch_size: int = 16,
               progress: bool = True, positions=(EVERY, POOLED)) -> pd.DataFrame:
    """One row per (measure, position, α, method, target, sentence), columns `COLUMNS` (see the
    module's docstring). conf_drop is the drop of the model's probability for its predicted class
    (for the probe: of the probe's probability; flipped: the probe's answer changed), energy the
    share of the pooled layer-l representation's ||h||² removed, energy_all the share removed
    from every real token (NaN for ERASER rows, where n_words is the rationale's size). The
    matched directions need `cov` (as `faithfulness`); the probe rows need `probe`; `positions`
    says where the dose rows cut (the pooled position exists only where the model pools one)."""
    start = time.perf_counter()
    keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    bb = explainer.backbone
    bank = direction_bank(cov, seed=seed) if cov is not None else None
    order = sorted(keep, key=lambda i: -len(texts[i]))
    batches = [order[b:b + batch_size] for b in range(0, len(order), batch_size)]
    out: list[dict] = []
    with bb.lock:
        for idx in tqdm(batches, desc="instrument", disable=not progress):
            out += _batch(explainer, [texts[i] for i in idx], idx, seed, probe, bank, alphas, eraser, positions)
    df = pd.DataFrame(out, columns=COLUMNS)
    df.attrs["seconds"] = time.perf_counter() - start
    return df


def _batch(explainer, batch, text_index, seed, probe, bank, alphas, eraser, where_cut) -> list[dict]:
    bb = explainer.backbone
    enc, words = bb.tokenize(batch)
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, proba = explainer.forward(enc)
    B, T, d = states.shape
    pred = proba.argmax(1)
    conf = proba[np.arange(B), pred]
    mask = enc["attention_mask"]
    pooled = bb.pool(states, mask)
    bases = prediction_bases(explainer, pooled, text_index, seed, bank)
    runs = [(m, t, qs) for m, per in bases.items() for t, qs in per.items()]
    stacked = stack_bases([q for _, _, qs in runs for q in qs], d)  # (R*B, r, d)
    R = len(runs)
    rows: list[dict] = []

    def add(measure, position, alpha, method, target, b, drop, flipped, energy, energy_all, n_words=0):
        rows.append({"measure": measure, "position": position, "alpha": float(alpha), "method": method,
                     "target": target, "text_index": int(text_index[b]), "predicted": int(pred[b]),
                     "conf_drop": float(drop), "flipped": bool(flipped), "energy": float(energy),
                     "energy_all": float(energy_all), "n_words": int(n_words)})

    pos = pooled_positions(bb.pooling, mask)
    positions = [(EVERY, None)] if EVERY in where_cut else []
    if POOLED in where_cut and (pos >= 0).all():
        at = torch.zeros(B, T, dtype=torch.bool)
        at[torch.arange(B), torch.as_tensor(pos)] = True
        positions.append((POOLED, at.repeat(R, 1)))
    rep = {k: v.repeat(R, 1) for k, v in enc.items()}
    big = states.repeat(R, 1, 1)
    for position, where in positions:
        for alpha in alphas:
            new_states = scaled_cut(big, stacked, alpha, where)
            new = explainer.proba_from_states(rep, new_states).reshape(R, B, -1)
            e = energy_share(bb.pool(big, rep["attention_mask"]), bb.pool(new_states, rep["attention_mask"])).reshape(R, B)
            e_all = energy_share(big, new_states, rep["attention_mask"]).reshape(R, B)
            for j, (m, t, _) in enumerate(runs):
                for b in range(B):
                    add(DOSE, position, alpha, m, t, b, conf[b] - new[j, b, pred[b]], new[j, b].argmax() != pred[b],
                        e[j, b], e_all[j, b])
    if probe is not None:
        cls = {c: i for i, c in enumerate(probe.classes_)}
        hp = pooled.repeat(R, 1)
        cut = project_out(hp[:, None, :], stacked)[:, 0]
        p0 = probe.predict_proba(pooled.numpy())
        p1 = probe.predict_proba(cut.numpy()).reshape(R, B, -1)
        e = energy_share(hp, cut).reshape(R, B)
        for j, (m, t, _) in enumerate(runs):
            for b in range(B):
                c = cls.get(int(pred[b]))
                if c is None:
                    continue
                add(PROBE, EVERY, 1.0, m, t, b, p0[b, c] - p1[j, b, c], p1[j, b].argmax() != p0[b].argmax(), e[j, b],
                    np.nan)
    if eraser:
        _, salient, _ = explainer.salient(enc, states, pred, words, "ig")
        picks = rationales(explainer, states, words, salient, text_index, seed)
        if picks:
            edited = [_without(batch[b], words[b], chosen) for _, _, b, chosen in picks] + \
                     [_only(words[b], chosen) for _, _, b, chosen in picks]
            scored = _score(explainer, edited)
            n = len(picks)
            for i, (m, kind, b, chosen) in enumerate(picks):
                c = pred[b]
                add(COMPREHENSIVENESS, EVERY, 1.0, m, kind, b, conf[b] - scored[i, c], scored[i].argmax() != c,
                    np.nan, np.nan, len(chosen))
                add(SUFFICIENCY, EVERY, 1.0, m, kind, b, conf[b] - scored[n + i, c], scored[n + i].argmax() != c,
                    np.nan, np.nan, len(chosen))
    return rows


def _score(explainer, texts: list[str], batch_size: int = 32) -> np.ndarray:
    """(N, C) the model's class probabilities of each text (an empty text is scored as one space)."""
    out = []
    for s in range(0, len(texts), batch_size):
        enc, _ = explainer.backbone.tokenize([t if t.strip() else " " for t in texts[s:s + batch_size]])
        enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        out.append(explainer.forward(enc)[1])
    return np.concatenate(out)


# --- summaries -------------------------------------------------------------------------------

PAIRS = {DOSE: [(PREDICTION, c) for c in MATCHED[PREDICTION]], PROBE: [(PREDICTION, c) for c in MATCHED[PREDICTION]],
         COMPREHENSIVENESS: list(RANDOM_WORDS.items()), SUFFICIENCY: list(RANDOM_WORDS.items())}


def instrument_differences(rows: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0, by_class: bool = False) -> pd.DataFrame:
    """Per measure, position, α and method: the target's drop minus its control's (`PAIRS`: the
    prediction concept minus each matched cut; a rationale minus as many random words) on the
    same sentences and seeds, with the crossed-bootstrap 95% intervals of `faithfulness`, and the
    mean energies of both (energy_a, energy_b; for ERASER rows the mean rationale sizes).
    by_class=True: one row per predicted class too."""
    rows = rows if "seed" in rows.columns else rows.assign(seed=0)
    out = []
    for (measure, position, alpha, method), g in rows.groupby(["measure", "position", "alpha", "method"], sort=False):
        for target, control in PAIRS[measure]:
            a, b = g[g["target"] == target], g[g["target"] == control]
            if measure in (COMPREHENSIVENESS, SUFFICIENCY):
                a, b = a.assign(energy=a["n_words"].astype(float)), b.assign(energy=b["n_words"].astype(float))
            groups = ([(c, a[a["predicted"] == c], b[b["predicted"] == c]) for c in sorted(a["predicted"].unique())]
                      if by_class else [(None, a, b)])
            for c, ga, gb in groups:
                got = paired_rows(ga, gb, n_boot, group_rng(seed, measure, position, str(alpha), method, target, control,
                                                         str(c)))
                if got is not None:
                    out.append({"measure": measure, "position": position, "alpha": alpha, "method": method,
                                "target": target, "control": control, **({"predicted": int(c)} if by_class else {}),
                                **got})
    return pd.DataFrame(out)


def dose_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean confidence drop and mean energies per (position, method, target, α) of the dose rows:
    the curves of drop against energy removed."""
    d = rows[rows["measure"] == DOSE]
    return (d.groupby(["position", "method", "target", "alpha"], sort=False)
            .agg(conf_drop=("conf_drop", "mean"), energy=("energy", "mean"), energy_all=("energy_all", "mean"),
                 n=("conf_drop", "size")).reset_index())
