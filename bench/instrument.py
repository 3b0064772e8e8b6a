"""Runs the instruments of `vqlc_core/evaluate/instrument.py` on a built run: dose–response at
every position and at the pooled position, the probe, ERASER comprehensiveness and sufficiency,
each against its controls with 95% crossed-bootstrap intervals over sentences and seeds.
Writes bench/results/instrument_<run>.{md,parquet} and the dose–response figure
docs/instrument-<run>.png (mean confidence drop against energy removed, per method, the
prediction concept against its matched cuts).

    python bench/instrument.py --run decoder-frozen --texts 80 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vqlc_core.base.runio import read_parquet, write_parquet  # noqa: E402
from vqlc_core.pipeline.run import open_run  # noqa: E402
from vqlc_core.evaluate import instrument as ins  # noqa: E402
from vqlc_core.evaluate.evaluation import faithfulness_sentences, train_covariance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cell(r) -> str:
    return f"{r.diff_conf_drop:+.3f} [{r.diff_conf_drop_low:+.3f}, {r.diff_conf_drop_high:+.3f}]"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a built run's name")
    ap.add_argument("--texts", type=int, default=80, help="test sentences (the faithfulness table's seeded sample)")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="method seeds (default: the run's)")
    ap.add_argument("--reuse", action="store_true", help="summarise the rows of an earlier call instead of measuring")
    ap.add_argument("--from-build", action="store_true",
                    help="summarise the rows the run's evaluate stage measured (eval/instrument_rows.parquet: every "
                         "position only, --instrument-texts sentences) instead of measuring")
    args = ap.parse_args(argv)
    run = open_run(args.run)
    seeds = args.seeds if args.seeds else run.cfg.method_seeds
    texts = faithfulness_sentences(run.texts, args.texts, run.cfg.seed)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    if args.from_build:
        rows = run.instrument_rows()
        if rows.empty:
            raise SystemExit(f"Run '{args.run}' has no instrument rows; rebuild its evaluate stage.")
        seeds = sorted(rows["seed"].unique().tolist())
    elif args.reuse:
        rows = read_parquet(out / f"instrument_{args.run}.parquet")
    else:
        cov = train_covariance(run.store, seed=run.cfg.seed)
        probe = ins.fit_probe(run.store, seed=run.cfg.seed)
        parts = []
        for seed in seeds:
            ex = run.explainer({m: (run.method(m, seed), run.concept_set(m, seed)) for m in run.methods_built()})
            parts.append(ins.instrument(ex, texts, probe, seed=seed, cov=cov).assign(seed=seed))
        rows = pd.concat(parts, ignore_index=True)
        write_parquet(out / f"instrument_{args.run}.parquet", rows)
    diff = ins.instrument_differences(rows, seed=run.cfg.seed)
    by_class = ins.instrument_differences(rows, seed=run.cfg.seed, by_class=True)
    curves = ins.dose_curves(rows)
    lines = [f"# Instruments on `{args.run}`", "",
             (f"`python bench/instrument.py --run {args.run} --from-build` (the rows of its evaluate stage)"
              if args.from_build else
              f"`python bench/instrument.py --run {args.run} --texts {args.texts} --seeds {' '.join(map(str, seeds))}`")
             + ": "
             f"{rows['text_index'].nunique()} test sentences × {len(seeds)} seeds; probe train accuracy on its own rows "
             "not shown (a logistic regression on the layer's pooled train states and labels).", ""]
    for measure in ins.MEASURES:
        lines += [f"## {measure}", "", ins.DESCRIPTIONS[measure] + ". Target minus control, same sentences and seeds, "
                  "95% crossed-bootstrap interval; energy_a / energy_b: mean energy removed from the pooled "
                  "representation (ERASER: mean words in the rationale).", "",
                  "| position | α | method | target − control | all | predicted 0 | predicted 1 | energy_a | energy_b |",
                  "|---|---:|---|---|---:|---:|---:|---:|---:|"]
        for r in diff[diff["measure"] == measure].itertuples():
            cls = by_class[(by_class["measure"] == measure) & (by_class["position"] == r.position)
                           & (by_class["alpha"] == r.alpha) & (by_class["method"] == r.method)
                           & (by_class["control"] == r.control)]
            per = {int(c.predicted): _cell(c) for c in cls.itertuples()}
            lines.append(f"| {r.position} | {r.alpha:g} | {r.method} | {r.target} − {r.control} | {_cell(r)} | "
                         f"{per.get(0, '')} | {per.get(1, '')} | {r.energy_a:.3f} | {r.energy_b:.3f} |")
        lines.append("")
    lines += ["## Dose–response curves (means)", "", "| position | method | target | α | conf drop | energy (pooled) | "
              "energy (every token) | n |", "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {c.position} | {c.method} | {c.target} | {c.alpha:g} | {c.conf_drop:.4f} | {c.energy:.4f} | "
              f"{c.energy_all:.4f} | {c.n} |" for c in curves.itertuples()] + [""]
    (out / f"instrument_{args.run}.md").write_text("\n".join(lines))
    methods = list(dict.fromkeys(curves["method"]))
    positions = list(dict.fromkeys(curves["position"]))
    fig, axes = plt.subplots(len(positions), len(methods), figsize=(4 * len(methods), 3.2 * len(positions)),
                             squeeze=False)
    for i, pos in enumerate(positions):
        for j, m in enumerate(methods):
            ax = axes[i][j]
            for t in ins.CUT_TARGETS:
                c = curves[(curves["position"] == pos) & (curves["method"] == m) & (curves["target"] == t)]
                ax.plot(c["energy"], c["conf_drop"], marker="o", label=t)
            ax.set_title(f"{m}, {pos}", fontsize=9)
            ax.set_xlabel("energy removed (pooled)")
            ax.set_ylabel("confidence drop")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{args.run}: dose–response, α ∈ {{0.25, 0.5, 0.75, 1}}", fontsize=10)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / f"instrument-{args.run}.png", dpi=110)
    print(f"wrote {out / f'instrument_{args.run}.md'} and docs/instrument-{args.run}.png")


if __name__ == "__main__":
    main()
