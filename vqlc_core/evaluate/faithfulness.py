"""Faithfulness of concept explanations over a test set: remove a direction (or a span) from
layer l by orthogonal projection, run the rest of the model, and record per sentence how much
the predicted class's probability drops, whether the label flips, and how much of the pooled
representation's energy the projection removed. Then summarise per (method, target) with 95%
bootstrap intervals, and compare two methods sentence by sentence.

Targets, per method: the concept of the prediction representation (centred on the train mean,
and uncentred as the old number), the concepts of the salient words (their span, centred) and a
random other concept of the method (centred). Controls, under the method name "control" since
they do not depend on a method: the direction of the train rows' mean, and a random unit
direction. Uncentred concept vectors point mostly along that mean (RESEARCH.md section 1), so a
concept is only worth its drop against controls that remove comparable energy.

Energy-matched controls (`MATCHED`, drawn by `controls`), per method and sentence, for the
prediction concept and for the salient-word concepts: the other concept(s) of the same method,
and random directions from N(0, Σ_train), that remove the energy closest to the target's. The
prediction concept's matched concept is drawn from the method's other prediction concepts (those
that hold train predictions, `prediction_pool`): a word concept carries less class information,
so it would be a weaker control. A drop is then compared with a drop of the same size of cut
(`matched_differences`). The prediction concept is also compared with the class direction
(`CLASS_DIRECTION`, method "control": the centred mean of the train predictions of the sentence's
predicted class); a prediction concept that does no more than it says no more than the class.

Texts run in length-sorted batches: one forward gives layer-l states and probabilities, one
batched attribution pass finds each text's salient words, and every ablation of a batch (all
methods and targets together) is one more forward that starts at layer l.
"""

from __future__ import annotations

import time
import zlib

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from vqlc_core.base.runio import RunError
from vqlc_core.base.stats import N_BOOT, crossed_means, interval
from vqlc_core.evaluate.controls import (class_directions, direction_bank, matched_basis, prediction_pool,
                                         removed_energy, unit_energy)
from vqlc_core.explain.ablation import orthonormal_basis, project_out
from vqlc_core.explain.explainer import Explainer

PREDICTION, SALIENT, RANDOM_CONCEPT = "prediction concept", "salient-word concepts", "random concept"
UNCENTRED = "prediction concept (uncentred)"
TARGETS = (PREDICTION, UNCENTRED, SALIENT, RANDOM_CONCEPT)
# target -> (its energy-matched other concept(s) of the same method, its energy-matched N(0, Σ) direction(s))
MATCHED = {PREDICTION: ("prediction: matched concept", "prediction: matched direction"),
           SALIENT: ("salient: matched concepts", "salient: matched directions")}
ALL_TARGETS = TARGETS + tuple(t for pair in MATCHED.values() for t in pair)
CONTROL = "control"  # the method name of the rows that do not depend on a concept method
GLOBAL_MEAN, RANDOM_DIRECTION = "global mean", "random direction"
CLASS_DIRECTION = "class direction"  # a control row only where the class means are given (`faithfulness`)
CONTROLS = (GLOBAL_MEAN, RANDOM_DIRECTION, CLASS_DIRECTION)
# target -> controls of method CONTROL it is also compared with, sentence by sentence (`matched_differences`)
CLASS_CONTROLS = {PREDICTION: (CLASS_DIRECTION,)}
COLUMNS = ["method", "target", "text_index", "predicted", "conf_drop", "flipped", "energy", "n_directions"]


# --- small helpers ---------------------------------------------------------------------------

def text_rng(seed: int, method: str, text_index: int) -> np.random.Generator:
    """The random stream of one (seed, method, sentence): the same whatever the batching."""
    return np.random.default_rng([int(seed), zlib.crc32(method.encode()), int(text_index)])


def stack_bases(bases: list[torch.Tensor], d: int) -> torch.Tensor:
    """(B, r_max, d) per-example orthonormal bases, padded with zero rows (which remove nothing)."""
    r = max([len(q) for q in bases] + [1])
    out = torch.zeros(len(bases), r, d)
    for i, q in enumerate(bases):
        out[i, : len(q)] = q
    return out


def _codes(x: pd.Series) -> np.ndarray:
    return pd.factorize(x, sort=True)[0]


def group_rng(seed: int, *keys: str) -> np.random.Generator:
    return np.random.default_rng([int(seed)] + [zlib.crc32(k.encode()) for k in keys])


def concept_arrays(cs) -> dict:
    """A concept set's arrays `_batch` reads for every text, computed once: the centred and
    uncentred directions (K, d) (row k equals `cs.directions([k])`, centred or not), their unit
    rows in float64, which concepts have train members, and which of those have a direction."""
    ids = np.arange(cs.n_concepts)
    dirs = cs.directions(ids)
    norms = np.linalg.norm(dirs.astype(np.float64), axis=1)
    sizes = cs.sizes
    n_pred = cs.summary["n_pred"].to_numpy()
    return {"ids": ids, "dirs": dirs, "uncentred": cs.directions(ids, centred=False),
            "unit": dirs.astype(np.float64) / np.maximum(norms, 1e-30)[:, None],
            "usable": (sizes > 0) & (norms > 0), "with_members": np.flatnonzero(sizes > 0),
            "prediction": (sizes > 0) & (n_pred > 0)}  # concepts that hold train predictions


# --- the table -------------------------------------------------------------------------------

def faithfulness(explainer: Explainer, texts: list[str], seed: int = 0, progress: bool = True,
                 max_texts: int | None = None, batch_size: int = 32, salient: str = "ig",
                 cov: np.ndarray | None = None, class_means: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (method, target, sentence) with columns `COLUMNS`: conf_drop (old minus new
    probability of the originally predicted class), flipped (the predicted class changed),
    energy (share of the pooled layer-l representation's ||h||² the projection removed) and
    n_directions (rank of the removed span). text_index is the sentence's position in `texts`,
    predicted its predicted class.

    Targets per method: `TARGETS` and the energy-matched controls of `MATCHED` (the matched
    directions only with `cov`, the train states' covariance (d, d), from which they are drawn:
    `controls.direction_bank`); the controls `CONTROLS` once, as method "control", the class
    direction only with `class_means` (C, d), the mean state of the train prediction rows of each
    class the model predicted (`prediction_class_means`). The
    salient words are the Explain page's (Integrated Gradients with the explainer's `ig_steps`,
    or salient="grad_x_input" for one gradient); a sentence without an eligible salient word
    has no salient-word row. The random concept (another concept with train members) and the
    random direction are drawn per (seed, method, sentence), whatever the batching. Empty
    texts are skipped. `df.attrs["seconds"]` holds the wall time, `df.attrs["ig_completeness"]`
    each text's completeness error of its attributions (see `Attribution.completeness_error`) and
    `df.attrs["ig_baseline_proba"]` each text's predicted class and its IG baseline's probabilities."""
    start = time.perf_counter()
    keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    keep = keep[:max_texts] if max_texts is not None else keep
    bb, names = explainer.backbone, list(explainer.methods)
    d = bb.hidden_size
    out: list[dict] = []
    errors: list[float] = []
    base_p: list[tuple[int, list[float]]] = []
    if not names or not keep:
        return pd.DataFrame(out, columns=COLUMNS)
    mean = explainer.methods[names[0]][1].mean  # the store's train mean: one for every method
    if mean is None:
        raise RunError(f"The concept set of {names[0]} has no train mean (it predates centred directions); "
                       "rebuild this method's stage.")
    mean_basis = orthonormal_basis(mean)
    bank = direction_bank(cov, seed=seed) if cov is not None else None
    by_class = class_directions(class_means, np.asarray(mean, dtype=np.float64))

    order = sorted(keep, key=lambda i: -len(texts[i]))
    batches = [order[b : b + batch_size] for b in range(0, len(order), batch_size)]
    with bb.lock:
        for idx in tqdm(batches, desc="faithfulness", disable=not progress):
            rows, attr, pred = _batch(explainer, [texts[i] for i in idx], idx, seed, salient, mean_basis, d, bank,
                                      by_class)
            out += rows
            errors += [float(e) for e in attr.completeness_error]
            if attr.baseline_proba is not None:
                base_p += [(int(p), [float(x) for x in q]) for p, q in zip(pred, attr.baseline_proba)]

    df = pd.DataFrame(out, columns=COLUMNS)
    order_of = [(CONTROL, t) for t in CONTROLS] + [(m, t) for m in names for t in ALL_TARGETS]
    rank = {key: r for r, key in enumerate(order_of)}
    df = df.assign(_r=[rank[k] for k in zip(df["method"], df["target"])])
    df = df.sort_values(["_r", "text_index"], kind="stable").drop(columns="_r").reset_index(drop=True)
    df.attrs["seconds"] = time.perf_counter() - start
    df.attrs["ig_completeness"] = errors
    df.attrs["ig_baseline_proba"] = base_p  # per text: (predicted class, the baseline's class probabilities)
    return df


def _batch(explainer: Explainer, batch: list[str], text_index: list[int], seed: int, how: str,
           mean_basis: torch.Tensor, d: int, bank: np.ndarray | None = None,
           by_class: list[torch.Tensor | None] | None = None) -> tuple[list[dict], object, np.ndarray]:
    """The rows of one batch of texts (see `faithfulness`), the batch's Attribution and its
    predicted classes."""
    bb = explainer.backbone
    enc, words = bb.tokenize(batch)
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, proba = explainer.forward(enc)  # (B, T, d), (B, C)
    B = len(batch)
    pred = proba.argmax(1)
    conf = proba[np.arange(B), pred]
    pooled = bb.pool(states, enc["attention_mask"])  # (B, d)
    _, salient, attr = explainer.salient(enc, states, pred, words, how)

    runs: list[tuple[str, str, list[torch.Tensor | None]]] = []  # (method, target, basis per text or None)
    runs.append((CONTROL, GLOBAL_MEAN, [mean_basis] * B))
    runs.append((CONTROL, RANDOM_DIRECTION, [orthonormal_basis(text_rng(seed, CONTROL, t).standard_normal(d))
                                               for t in text_index]))
    if by_class is not None:  # the predicted class's direction (train predictions of that class)
        runs.append((CONTROL, CLASS_DIRECTION, [by_class[int(p)] if int(p) < len(by_class) else None for p in pred]))
    hp = pooled.double().numpy()  # (B, d)
    # each text's energy along every bank direction, shared by every method's matched directions
    bank_single = [unit_energy(hp[b], bank) for b in range(B)] if bank is not None else None
    everywhere = np.ones(len(bank), bool) if bank is not None else None
    for name, (method, cs) in explainer.methods.items():
        k_pred = (getattr(method, "predict_predictions", None) or method.predict)(pooled.numpy())
        c = concept_arrays(cs)
        pred_c, pred_u, words_c, rand_c = [], [], [], []
        m_pred_c, m_pred_d, m_words_c, m_words_d = [], [], [], []
        for b in range(B):
            k = int(k_pred[b])
            rng = text_rng(seed, name + ":matched", text_index[b])
            single = unit_energy(hp[b], c["unit"])  # this text's energy along every concept direction
            target = orthonormal_basis(c["dirs"][[k]])
            pred_c.append(target)
            pred_u.append(orthonormal_basis(c["uncentred"][[k]]))
            m_pred_c.append(matched_basis(hp[b], c["unit"], prediction_pool(c, k), None, rng, single, target))
            m_pred_d.append(matched_basis(hp[b], bank, everywhere, None, rng, bank_single[b], target)
                            if bank is not None else None)
            if salient[b]:
                ids = np.unique(method.predict(explainer.word_vectors(states[b], [words[b][i] for i in salient[b]])))
                target = orthonormal_basis(c["dirs"][ids])
                words_c.append(target)
                m_words_c.append(matched_basis(hp[b], c["unit"], c["usable"] & ~np.isin(c["ids"], ids), None, rng,
                                               single, target))
                m_words_d.append(matched_basis(hp[b], bank, everywhere, None, rng, bank_single[b], target)
                                 if bank is not None else None)
            else:
                words_c.append(None)
                m_words_c.append(None)
                m_words_d.append(None)
            others = c["with_members"][c["with_members"] != k]
            other = int(text_rng(seed, name, text_index[b]).choice(others)) if len(others) else None
            rand_c.append(orthonormal_basis(c["dirs"][[other]]) if other is not None else None)
        runs += [(name, TARGETS[0], pred_c), (name, TARGETS[1], pred_u), (name, TARGETS[2], words_c),
                 (name, TARGETS[3], rand_c), (name, MATCHED[PREDICTION][0], m_pred_c),
                 (name, MATCHED[SALIENT][0], m_words_c)]
        if bank is not None:
            runs += [(name, MATCHED[PREDICTION][1], m_pred_d), (name, MATCHED[SALIENT][1], m_words_d)]

    zero = torch.zeros(0, d)
    bases = stack_bases([q if q is not None else zero for _, _, qs in runs for q in qs], d)  # (R*B, r, d)
    n_runs = len(runs)
    rep = {k: v.repeat(n_runs, 1) for k, v in enc.items()}
    new = explainer.proba_from_states(rep, project_out(states.repeat(n_runs, 1, 1), bases)).reshape(n_runs, B, -1)
    energy = removed_energy(pooled.repeat(n_runs, 1), bases).reshape(n_runs, B)
    rows = []
    for j, (method, target, qs) in enumerate(runs):
        for b in range(B):
            if qs[b] is None:
                continue
            rows.append({"method": method, "target": target, "text_index": int(text_index[b]),
                         "predicted": int(pred[b]), "conf_drop": float(conf[b] - new[j, b, pred[b]]),
                         "flipped": bool(new[j, b].argmax() != pred[b]),
                         "energy": float(energy[j, b]), "n_directions": int(len(qs[b]))})
    return rows, attr, pred


# --- summaries -------------------------------------------------------------------------------

def summarize_faithfulness(rows: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0,
                           by_class: bool = False) -> pd.DataFrame:
    """Per (method, target), in the rows' order: n_sentences, n_seeds, n (rows), mean_conf_drop
    and flip_rate each with a 95% bootstrap interval (`*_low`, `*_high`), mean_energy and
    mean_directions.

    `rows` are `faithfulness` rows, optionally with a `seed` column (the methods' training
    seed, one faithfulness call per seed). The sentences are the same under every seed and
    the seeds share every sentence: the two factors are crossed, so the bootstrap draws
    sentences and seeds independently with replacement and weights each (seed, sentence) row
    by the product of their counts (the "pigeonhole" bootstrap of crossed designs, Owen 2007).
    It counts both sources of variation: a sentence that is hard for every seed, and a seed
    whose concepts are better on every sentence. With a single seed it is the plain bootstrap
    over sentences. Percentile intervals. by_class=True: one row per (method, target, predicted
    class), with a `predicted` column (a prediction concept may explain one class and not the
    other)."""
    cols = ["method", "target", *(["predicted"] if by_class else []), "n_sentences", "n_seeds", "n", "mean_conf_drop",
            "conf_drop_low", "conf_drop_high", "flip_rate", "flip_rate_low", "flip_rate_high", "mean_energy",
            "mean_directions"]
    if len(rows) == 0:
        return pd.DataFrame(columns=cols)
    rows = rows if "seed" in rows.columns else rows.assign(seed=0)
    keys = ["method", "target", "predicted"] if by_class else ["method", "target"]
    out = []
    for key, g in rows.groupby(keys, sort=False):
        method, target = key[0], key[1]
        values = np.stack([g["conf_drop"].to_numpy(float), g["flipped"].to_numpy(float)], 1)
        reps = crossed_means(_codes(g["seed"]), _codes(g["text_index"]), values, n_boot,
                             group_rng(seed, method, target, *map(str, key[2:])))
        low, high = interval(reps)
        out.append({"method": method, "target": target, **({"predicted": int(key[2])} if by_class else {}),
                    "n_sentences": int(g["text_index"].nunique()),
                    "n_seeds": int(g["seed"].nunique()), "n": int(len(g)),
                    "mean_conf_drop": float(values[:, 0].mean()), "conf_drop_low": float(low[0]),
                    "conf_drop_high": float(high[0]), "flip_rate": float(values[:, 1].mean()),
                    "flip_rate_low": float(low[1]), "flip_rate_high": float(high[1]),
                    "mean_energy": float(g["energy"].mean()), "mean_directions": float(g["n_directions"].mean())})
    return pd.DataFrame(out, columns=cols)


def paired_rows(ra: pd.DataFrame, rb: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> dict | None:
    """Rows `ra` minus rows `rb` on the (seed, sentence) pairs both have: mean differences in
    conf_drop and flip rate with crossed-bootstrap 95% intervals, and the two mean energies."""
    m = ra.merge(rb, on=["seed", "text_index"], suffixes=("_a", "_b"))
    if m.empty:
        return None
    diff = np.stack([m["conf_drop_a"].to_numpy(float) - m["conf_drop_b"].to_numpy(float),
                     m["flipped_a"].to_numpy(float) - m["flipped_b"].to_numpy(float)], 1)
    low, high = interval(crossed_means(_codes(m["seed"]), _codes(m["text_index"]), diff, n_boot, rng))
    return {"n_pairs": int(len(m)), "n_sentences": int(m["text_index"].nunique()), "n_seeds": int(m["seed"].nunique()),
            "diff_conf_drop": float(diff[:, 0].mean()), "diff_conf_drop_low": float(low[0]),
            "diff_conf_drop_high": float(high[0]), "diff_flip_rate": float(diff[:, 1].mean()),
            "diff_flip_rate_low": float(low[1]), "diff_flip_rate_high": float(high[1]),
            "energy_a": float(m["energy_a"].mean()), "energy_b": float(m["energy_b"].mean())}


def matched_differences(rows: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0,
                        by_class: bool = False) -> pd.DataFrame:
    """Per method and target of `MATCHED` (the prediction concept, the salient-word concepts):
    the target's drop minus its energy-matched control's (the matched other concept(s), the
    matched N(0, Σ) direction(s)) on the same sentences and seeds, with 95% crossed-bootstrap
    intervals and both mean energies. Above zero: the concept matters more than an equally large
    cut. A target of `CLASS_CONTROLS` is also compared with those rows of method "control" (the
    prediction concept with the class direction), where the rows hold them. by_class=True: one
    row per predicted class too."""
    cols = ["method", "target", "control", *(["predicted"] if by_class else []), "n_pairs", "n_sentences", "n_seeds",
            "diff_conf_drop", "diff_conf_drop_low", "diff_conf_drop_high", "diff_flip_rate", "diff_flip_rate_low",
            "diff_flip_rate_high", "energy_a", "energy_b"]
    rows = rows if "seed" in rows.columns else rows.assign(seed=0)
    out = []
    for method in dict.fromkeys(rows["method"]):
        if method == CONTROL:
            continue
        mine, shared = rows[rows["method"] == method], rows[rows["method"] == CONTROL]
        for target, controls in MATCHED.items():
            for control, pool in [(c, mine) for c in controls] + [(c, shared) for c in CLASS_CONTROLS.get(target, ())]:
                a, b = mine[mine["target"] == target], pool[pool["target"] == control]
                groups = ([(c, a[a["predicted"] == c], b[b["predicted"] == c]) for c in sorted(a["predicted"].unique())]
                          if by_class else [(None, a, b)])
                for c, ga, gb in groups:
                    got = paired_rows(ga, gb, n_boot, group_rng(seed, method, target, control, str(c)))
                    if got is not None:
                        out.append({"method": method, "target": target, "control": control,
                                    **({"predicted": int(c)} if by_class else {}), **got})
    return pd.DataFrame(out, columns=cols)


def paired_differences(rows: pd.DataFrame, a: str = "vqlc", b: str = "kmeans", target: str | None = None,
                       n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Method `a` minus method `b`, per target (`target`, or every target both have): the mean
    difference in conf_drop and in flip rate over the (seed, sentence) pairs both methods have,
    each with a 95% interval from the same crossed bootstrap as `summarize_faithfulness`,
    resampling the pairs' sentences and seeds (pairing removes the sentence's own difficulty,
    which both methods share)."""
    cols = ["method_a", "method_b", "target", "n_pairs", "n_sentences", "n_seeds", "diff_conf_drop",
            "diff_conf_drop_low", "diff_conf_drop_high", "diff_flip_rate", "diff_flip_rate_low", "diff_flip_rate_high"]
    rows = rows if "seed" in rows.columns else rows.assign(seed=0)
    ra, rb = rows[rows["method"] == a], rows[rows["method"] == b]
    targets = [target] if target is not None else [t for t in dict.fromkeys(ra["target"]) if t in set(rb["target"])]
    out = []
    for t in targets:
        got = paired_rows(ra[ra["target"] == t], rb[rb["target"] == t], n_boot, group_rng(seed, a, b, t))
        if got is not None:
            got.pop("energy_a"), got.pop("energy_b")
            out.append({"method_a": a, "method_b": b, "target": t, **got})
    return pd.DataFrame(out, columns=cols)
