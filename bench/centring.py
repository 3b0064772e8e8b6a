"""Why a decoder's prediction drops under a cut in almost any direction, and why the mean hides
its prediction concept: at the pooled (last) token of layer l, per test sentence and method,
the confidence drop of

- `concept`: cutting the prediction concept's direction centred on the train rows' mean (the
  faithfulness table's ablation, at the pooled token only);
- `concept, prediction-centred`: the same concept centred on the train prediction rows' mean;
- `matched direction` / `matched direction (prediction-centred)`: the N(0, Σ) direction (the
  table's bank) whose energy on h is closest to each of those;
- `shrink`: h scaled by sqrt(1 − e), the same energy e as the concept's cut removed, no direction.

Split by predicted class; mean with a normal 95% interval (±1.96 standard errors) over
sentences. Writes bench/results/centring_<run>.{json,md}.

    python bench/centring.py --run decoder --texts 200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vqlc_core.pipeline.run import open_run
from vqlc_core.evaluate.controls import direction_bank, unit_energy
from vqlc_core.evaluate.evaluation import faithfulness_sentences, train_covariance
from vqlc_core.explain.attribution import pooled_positions

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("concept", "concept, prediction-centred", "matched direction", "matched direction (prediction-centred)",
            "shrink")


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-30)


def measure(run, texts: list[str], seed: int = 0) -> pd.DataFrame:
    bank = direction_bank(train_covariance(run.store, seed=run.cfg.seed), seed=seed)
    prow = run.store.rows_where("train", "pred")
    pred_mean = run.store.read(prow).astype(np.float64).mean(0)
    out = []
    for m in run.methods_built():
        ex = run.explainer([m])
        method, cs = ex.methods[m]
        mean = np.asarray(cs.mean, np.float64)
        ask = getattr(method, "predict_predictions", method.predict)
        for i in range(0, len(texts), 16):
            enc, _ = ex.backbone.tokenize(texts[i:i + 16])
            enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            states, proba = ex.forward(enc)
            B = len(proba)
            pred = proba.argmax(1)
            pos = pooled_positions(ex.backbone.pooling, enc["attention_mask"])
            if (pos < 0).any():
                raise SystemExit("This run pools no single token (mean pooling); the probe needs a pooled position.")
            pooled = states[torch.arange(B), torch.as_tensor(pos)].double().numpy()
            ids = ask(pooled.astype(np.float32))
            new = {v: states.clone() for v in VARIANTS}
            energy = {}
            for b in range(B):
                h, t = pooled[b], int(pos[b])
                single = unit_energy(h, bank)
                for name, ref in (("concept", mean), ("concept, prediction-centred", pred_mean)):
                    u = _unit(cs.vectors[int(ids[b])].astype(np.float64) - ref)
                    e = float((h @ u) ** 2 / (h @ h))
                    r = bank[int(np.argmin(np.abs(single - e)))].astype(np.float64)
                    control = "matched direction" + ("" if ref is mean else " (prediction-centred)")
                    new[name][b, t] = torch.as_tensor(h - (h @ u) * u, dtype=torch.float32)
                    new[control][b, t] = torch.as_tensor(h - (h @ r) * r, dtype=torch.float32)
                    energy[(name, b)] = energy[(control, b)] = e
                new["shrink"][b, t] = torch.as_tensor(np.sqrt(1 - energy[("concept", b)]) * h, dtype=torch.float32)
                energy[("shrink", b)] = energy[("concept", b)]
            conf = proba[np.arange(B), pred]
            for v, st in new.items():
                p = ex.proba_from_states(enc, st)
                out += [{"method": m, "variant": v, "predicted": run.class_names[int(pred[b])],
                         "conf_drop": float(conf[b] - p[b, pred[b]]), "energy": energy[(v, b)]} for b in range(B)]
    return pd.DataFrame(out)


def summary(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    g = rows.groupby(by, sort=False)
    s = g.agg(mean=("conf_drop", "mean"), sem=("conf_drop", "sem"), energy=("energy", "mean"), n=("conf_drop", "size"))
    return s.assign(low=s["mean"] - 1.96 * s["sem"], high=s["mean"] + 1.96 * s["sem"]).reset_index()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a built run of a model that pools one token (a decoder)")
    ap.add_argument("--texts", type=int, default=200, help="test sentences (the faithfulness table's seeded sample)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    run = open_run(args.run)
    rows = measure(run, faithfulness_sentences(run.texts, args.texts, run.cfg.seed))
    both, per = summary(rows, ["method", "variant"]), summary(rows, ["method", "variant", "predicted"])
    cell = lambda r: f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"  # noqa: E731
    classes = list(dict.fromkeys(per["predicted"]))
    lines = [f"# Where a cut moves a prediction: `{args.run}`", "", f"`python bench/centring.py --run {args.run} "
             f"--texts {args.texts}`: {rows.groupby('method').size().iloc[0] // len(VARIANTS)} test sentences, the "
             "first seed's concepts, at the pooled token of layer l only. Mean confidence drop [normal 95% interval]; "
             "energy: mean share of ||h||² removed.", "",
             "| method | cut | all | " + " | ".join(f"predicted {c}" for c in classes) + " | energy |",
             "|---|---|---:|" + "---:|" * len(classes) + "---:|"]
    for r in both.to_dict("records"):
        cls = {c["predicted"]: cell(c) for c in per.to_dict("records")
               if (c["method"], c["variant"]) == (r["method"], r["variant"])}
        lines.append(f"| {r['method']} | {r['variant']} | {cell(r)} | " + " | ".join(cls.get(c, "–") for c in classes)
                     + f" | {r['energy']:.3f} |")
    out = ROOT / "bench" / "results"
    (out / f"centring_{args.run}.md").write_text("\n".join(lines) + "\n")
    from results_io import write_result

    write_result(out / f"centring_{args.run}.json", {"all": both.to_dict("records"), "by_class": per.to_dict("records")})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
