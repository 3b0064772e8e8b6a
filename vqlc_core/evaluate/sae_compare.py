"""The paper's comparison of concepts with sparse-autoencoder features, for the methods of a run:
how many features a word uses (L0), how many features never fire, on what share of test
sentences each one fires, how much of the held-out variance the reconstruction explains, and
how much of the task a linear probe on each sentence's bag of features recovers, and with how
few features.

A method with `encode` (the SAE) gives each row its firing latents; any other gives each row
its one concept from the concept set. `vqlc sae-compare --run NAME` writes
eval/sae_compare.json and prints the table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse

from vqlc_core.base.markdown import markdown_table
from vqlc_core.base.runio import RunError, read_json, read_parquet, write_json
from vqlc_core.evaluate.faithfulness import PREDICTION
from vqlc_core.methods.metrics import centroid_r2

COMPARE_FILE = "sae_compare.json"
PROBE_C = (0.01, 0.1, 1.0, 10.0)  # the probe's inverse regularisation, chosen on dev sentences
SHARE_OF_BEST = 0.9  # the probe's accuracy a top-n subset of features must reach


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}" if isinstance(x, float) else f"{x:,}"


# --- features per row and per sentence ----------------------------------------------------------

def row_features(method, cs, store, batch_size: int = 8192):
    """Which features fire on every store row: (row ids, feature ids) of each firing, in row
    order, for a method with `encode` (its latents with a positive activation); otherwise one
    firing per row, its concept in the concept set `cs`."""
    if not hasattr(method, "encode"):
        return np.arange(store.n_rows), np.asarray(cs.assignments, dtype=np.int64)
    rows, feats, start = [], [], 0
    for x in store.iter_batches(batch_size, shuffle=False):
        acts, idx = method.encode(x.numpy())
        r, c = np.nonzero(acts > 0)
        rows.append(r + start)
        feats.append(idx[r, c])
        start += len(x)
    return np.concatenate(rows), np.concatenate(feats)


def sentence_bags(rows: np.ndarray, feats: np.ndarray, tokens: pd.DataFrame, n_texts: int,
                  n_features: int) -> sparse.csr_matrix:
    """(n_texts, n_features) counts: on how many of a sentence's words each feature fires
    (word rows only; the prediction row is the classifier's own input)."""
    word = (tokens["kind"] == "word").to_numpy()[rows]
    text = tokens["text_id"].to_numpy()[rows[word]]
    ones = np.ones(int(word.sum()), dtype=np.float32)
    return sparse.csr_matrix((ones, (text, feats[word])), shape=(n_texts, n_features))


# --- the probe ------------------------------------------------------------------------------------

def _fit_probe(X, y, C: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=2000, random_state=seed).fit(X, y)


def probe(bags: sparse.csr_matrix, labels: np.ndarray, split: np.ndarray, seed: int = 0) -> dict:
    """Test accuracy of a logistic regression on each sentence's bag of features (columns
    scaled by their train std, C chosen on dev sentences), and how many features, ranked by the
    largest |coefficient| over classes, reach `SHARE_OF_BEST` of it (refitted on the top n for
    n = 1, 2, 4, ... and all; `curve` holds n and its test accuracy; `majority` is the test
    accuracy of always answering the most common class)."""
    tr, dv, te = (split == "train"), (split == "dev"), (split == "test")
    used = np.flatnonzero(np.asarray((bags[tr] > 0).sum(0)).ravel() > 0)  # features seen in train sentences
    X = bags[:, used].tocsc()
    std = np.sqrt(np.asarray(X[tr].multiply(X[tr]).mean(0)).ravel() - np.asarray(X[tr].mean(0)).ravel() ** 2)
    X = (X @ sparse.diags(1.0 / np.maximum(std, 1e-6))).tocsr()

    def acc(model, cols=None):
        Z = X if cols is None else X[:, cols]
        return float((model.predict(Z[te]) == labels[te]).mean())

    dev_acc = {C: float((_fit_probe(X[tr], labels[tr], C, seed).predict(X[dv]) == labels[dv]).mean()) for C in PROBE_C}
    C = max(PROBE_C, key=lambda c: (dev_acc[c], -c))  # ties: the stronger regularisation
    full = _fit_probe(X[tr], labels[tr], C, seed)
    best = acc(full)
    order = np.argsort(-np.abs(full.coef_).max(0), kind="stable")
    sizes = sorted({min(2**i, len(order)) for i in range(int(np.ceil(np.log2(max(len(order), 1)))) + 1)})
    curve, n90 = [], None
    for n in sizes:
        cols = np.sort(order[:n])
        a = acc(_fit_probe(X[tr][:, cols], labels[tr], C, seed), cols)
        curve.append([int(n), a])
        if n90 is None and a >= SHARE_OF_BEST * best:
            n90 = int(n)
    majority = float(np.max(np.unique(labels[te], return_counts=True)[1]) / max(te.sum(), 1))
    return {"accuracy": best, "majority": majority, "C": C, "n_features_used": int(len(used)), "n_for_90": n90,
            "curve": curve}


# --- the comparison -------------------------------------------------------------------------------

def method_comparison(run, name: str, method, cs, seed: int = 0) -> dict:
    """The comparison's measures of one method of `run` (see the module docstring)."""
    store, texts = run.store, run.texts
    tokens = store.tokens
    rows, feats = row_features(method, cs, store)
    K = int(getattr(method, "n_word_concepts", cs.n_concepts))  # features of words: not the prediction concepts
    fired = np.bincount(feats, minlength=K)[:K] > 0
    test_word = ((tokens["split"] == "test") & (tokens["kind"] == "word")).to_numpy()
    on_test_words = test_word[rows]
    bags = sentence_bags(rows, feats, tokens, len(texts), K)
    test_texts = (texts["split"] == "test").to_numpy()
    share = np.asarray((bags[test_texts] > 0).mean(0)).ravel()  # (K,) share of test sentences it fires on
    dev = store.rows_where(split="dev")
    r2 = method.score_store(store, dev)["r2"] if method.encodes else None
    return {
        "n_features": K,
        "l0": float(on_test_words.sum() / max(test_word.sum(), 1)),
        "dead_fraction": float(1 - fired.mean()),
        "fire_share_median": float(np.median(share)),
        "fire_share_p90": float(np.quantile(share, 0.9)),
        "fire_share_mean": float(share.mean()),
        "dev_r2": float(r2 if r2 is not None else centroid_r2(store, dev, cs.assignments, cs.vectors)),
        "dev_centroid_r2": float(centroid_r2(store, dev, cs.assignments, cs.vectors)),
        "probe": probe(bags, texts["label"].to_numpy(), texts["split"].to_numpy(), seed=seed),
        "n_test_texts": int(test_texts.sum()),
    }


def _faithfulness(run) -> dict:
    """Mean confidence drop of ablating the prediction concept, per method, over the test
    sentences of the first seed (the methods compared), when the run's evaluation has it."""
    path = run.dir / "eval" / "faithfulness_rows.parquet"
    if not path.exists():
        return {}
    df = read_parquet(path)
    df = df[df["target"] == PREDICTION]
    if "seed" in df.columns:
        df = df[df["seed"] == run.cfg.method_seeds[0]]
    return {m: float(g["conf_drop"].mean()) for m, g in df.groupby("method")}


def _digest(run, name: str) -> str | None:
    files = run.manifest.data["stages"].get(name, {}).get("files", {})
    return (files.get(f"methods/{name}/assignments.npy") or {}).get("sha256")


def compare(run, methods: dict | None = None, seed: int | None = None) -> dict:
    """The comparison of `methods` ({name: (fitted method, concept set)}; by default every
    built method of `run`, first seed): one entry of measures per method, with the faithfulness
    of its prediction concept when the run's evaluation has it."""
    if methods is None:
        methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
    if not methods:
        raise RunError(f"Run '{run.dir.name}' has no concept method built yet; build it first.")
    seed = run.cfg.seed if seed is None else seed
    faith = _faithfulness(run)
    out = {}
    for name, (method, cs) in methods.items():
        out[name] = {**method_comparison(run, name, method, cs, seed), "faithfulness": faith.get(name),
                     "assignments_sha256": _digest(run, name)}
    return {"run": run.dir.name, "order": list(out), "methods": out}  # JSON may sort the methods' keys


def markdown(result: dict) -> str:
    """The comparison as one markdown table, a row per method."""
    cols = ["method", "features", "L0", "dead", "fires on (median / p90 of test sentences)", "dev R²",
            "probe acc.", f"features for {SHARE_OF_BEST:.0%}", "Δconf (pred. concept)"]
    rows = []
    for m in result.get("order", list(result["methods"])):
        r = result["methods"][m]
        p = r["probe"]
        rows.append([m, f"{r['n_features']:,}", _fmt(r["l0"], 1), f"{r['dead_fraction']:.1%}",
                     f"{r['fire_share_median']:.2%} / {r['fire_share_p90']:.2%}", _fmt(r["dev_r2"]),
                     _fmt(p["accuracy"]), _fmt(p["n_for_90"]), _fmt(r["faithfulness"])])
    return markdown_table(cols, rows) + "\n"


def write(run, result: dict) -> None:
    write_json(run.dir / "eval" / COMPARE_FILE, result)


def load(run) -> dict | None:
    """The run's written comparison, or None when there is none or a method it compared was
    rebuilt since (its assignments changed)."""
    path = run.dir / "eval" / COMPARE_FILE
    if not path.exists():
        return None
    result = read_json(path)
    if any(r.get("assignments_sha256") != _digest(run, m) for m, r in result["methods"].items()):
        return None
    return result


def command(run) -> str:
    """`vqlc sae-compare`: compare the run's built methods, SAE included, write
    eval/sae_compare.json and return the markdown table."""
    built = run.methods_built()
    if "sae" not in built:
        raise RunError(f"Run '{run.dir.name}' has no SAE built; build it with the run's own options plus "
                       f"`--methods {' '.join(built)} sae --rebuild evaluate`.")
    result = compare(run)
    write(run, result)
    return markdown(result)
