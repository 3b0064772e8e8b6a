"""Which input normalisation suits VQLC on encoder and decoder states (the choice of its default).

For each built run (default: MiniLM `default` and SmolLM2 `decoder`) VQLC is fitted on the run's
fit set with each normalisation, and measured on the dev rows (R² in the raw space) and on
every row (codebook perplexity, dead codes, largest concept). Also reported: how much of the
states' variance the 3 largest dimensions hold (decoders have a few huge-valued dimensions).
Usage: python bench/normalization.py [--runs default decoder]
Writes bench/results/normalization.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["default", "decoder"])
    ap.add_argument("--options", nargs="+", default=["standard", "center_rms", "none"])
    a = ap.parse_args()
    import numpy as np

    from vqlc_core.methods.metrics import codebook_perplexity, dead_codes
    from vqlc_core.pipeline.run import Run
    from vqlc_core.methods.vqlc import VQLC

    results = []
    for name in a.runs:
        run = Run(ROOT / "cache" / "runs" / name)
        store, rows = run.store, np.load(run.dir / "fitset.npy")
        x = store.read(rows)
        var = x.var(0)
        top3 = float(np.sort(var)[-3:].sum() / var.sum())
        dev = store.rows_where(split="dev")
        for norm in a.options:
            t0 = time.perf_counter()
            m = VQLC(n_concepts=run.cfg.methods.n_concepts, seed=0, normalize=norm, progress=False).fit(store, rows=rows)
            fit_s = time.perf_counter() - t0
            assign = m.predict_store(store)
            score = m.score_store(store, dev)
            results.append({"run": name, "model": run.cfg.extract.model, "normalize": norm, "fit_s": round(fit_s, 1),
                            "dev_r2": round(float(score["r2"]), 4),
                            "perplexity_all": round(float(codebook_perplexity(assign, m.n_concepts)), 1),
                            "dead_codes_all": int(dead_codes(assign, m.n_concepts)),
                            "largest_concept_share": round(float(np.bincount(assign).max() / len(assign)), 3),
                            "top3_dims_variance_share": round(top3, 3)})
            print(json.dumps(results[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "normalization.json", results, indent=2)
    lines = ["| run | normalize | dev R² (raw space) | perplexity (all rows) | dead codes | largest concept | "
             "top-3 dims' share of variance |", "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['run']} | {r['normalize']} | {r['dev_r2']} | {r['perplexity_all']} | {r['dead_codes_all']} | "
              f"{r['largest_concept_share']:.1%} | {r['top3_dims_variance_share']:.1%} |" for r in results]
    (RESULTS / "normalization.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
