"""The paper-style table over several built runs (settings): per setting and method, the
prediction concept and the salient-word concepts minus their energy-matched controls (the
matched other concept, the matched N(0, Σ) direction), each with its 95% crossed-bootstrap
interval over sentences and seeds, and which method is best: "VQLC best" when VQLC's
difference exceeds every other method's with a paired interval above zero, "VQLC behind" when
some method's exceeds VQLC's with its interval, "level" otherwise. Beside them, codebook use,
purity by true label, fit time and peak memory of each method, and each build's stage times.
Where the build ran the instruments (eval/instrument*.parquet), the same verdicts for the cut of
half the prediction concept against its matched cuts, the probe, and ERASER comprehensiveness
(higher is better) and sufficiency (lower is better) of each method's concept words against as
many random words. Reads each run's eval/faithfulness_rows.parquet and eval/measures.json; writes
docs/results/four-settings.md.

    python bench/four_settings.py --runs default default-bbc decoder decoder-bbc
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from vqlc_core.base.runio import read_parquet
from vqlc_core.base.stats import N_BOOT
from vqlc_core.pipeline.run import open_run
from vqlc_core.evaluate import instrument as ins
from vqlc_core.evaluate.faithfulness import (CLASS_CONTROLS, CONTROL, MATCHED, PREDICTION, SALIENT, group_rng,
                                             paired_rows)

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"vqlc": "VQLC", "kmeans": "K-Means", "lacoat": "LACOAT", "sae": "SAE"}


def _diff(a: pd.DataFrame, b: pd.DataFrame, seed: int, *key: str) -> tuple[float, float, float]:
    """Mean of a's per-(seed, sentence) difference minus b's, with faithfulness's paired interval."""
    f = lambda x: x.assign(conf_drop=x["d"], flipped=0.0, energy=0.0)  # noqa: E731
    got = paired_rows(f(a), f(b), N_BOOT, group_rng(seed, *key))
    return got["diff_conf_drop"], got["diff_conf_drop_low"], got["diff_conf_drop_high"]


def _per_pair(rows: pd.DataFrame, method: str, target: str, control: str) -> pd.DataFrame:
    r = rows[rows["method"] == method]
    shared = rows[rows["method"] == CONTROL] if control in CLASS_CONTROLS.get(target, ()) else r  # the class direction
    a = r[r["target"] == target][["seed", "text_index", "conf_drop"]]
    b = shared[shared["target"] == control][["seed", "text_index", "conf_drop"]]
    m = a.merge(b, on=["seed", "text_index"], suffixes=("_a", "_b"))
    return m.assign(d=m["conf_drop_a"] - m["conf_drop_b"])[["seed", "text_index", "d"]]


def _optional(run, name: str) -> pd.DataFrame:
    path = run.dir / "eval" / name
    return read_parquet(path) if path.exists() else pd.DataFrame()


def _at(df: pd.DataFrame, measure: str, alpha: float) -> pd.DataFrame:
    """The rows of one instrument at one α, cut at every position."""
    if df.empty:
        return df
    return df[(df["measure"] == measure) & (df["alpha"] == alpha) & (df["position"] == ins.EVERY)]


def _tuning(man: dict) -> str:
    """How the build fine-tuned its model: the mode, and which epoch dev accuracy chose (0: the
    head's linear-probe start, kept when no epoch beat it)."""
    ft = man["stages"].get("finetune", {})
    mode = ft.get("mode", "none")
    return mode if mode == "none" else f"{mode}, epoch {ft.get('chosen_epoch')} chosen by dev accuracy " \
                                       f"{ft.get('dev_accuracy', float('nan')):.3f}"


def _fmt(t) -> str:
    return f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"


def verdict_of(diffs: dict[str, pd.DataFrame], seed: int, key: tuple, higher: bool = True) -> str:
    """"VQLC best" when VQLC's per-(seed, sentence) differences `diffs[m]` (columns seed,
    text_index, d) exceed every other method's with a paired 95% interval above zero, "VQLC
    behind" when some method's exceed VQLC's with its interval, "level" otherwise; `higher=False`
    for a measure where smaller is better (ERASER sufficiency); "—" without VQLC and another."""
    if "vqlc" not in diffs or len(diffs) < 2:
        return "—"
    ahead, behind = [], []
    for o in diffs:
        if o == "vqlc":
            continue
        d, low, high = _diff(diffs["vqlc"], diffs[o], seed, *key, o)
        if not higher:
            d, low, high = -d, -high, -low
        ahead.append(low > 0)
        behind.append(high < 0)
    return "VQLC best" if all(ahead) else ("VQLC behind" if any(behind) else "level")


def setting(name: str) -> tuple[list[str], dict]:
    run = open_run(name)
    rows = read_parquet(run.dir / "eval" / "faithfulness_rows.parquet")
    meas = json.loads((run.dir / "eval" / "measures.json").read_text())
    man = json.loads((run.dir / "manifest.json").read_text())
    methods = [m for m in run.methods_built() if m in set(rows["method"])]
    cfg = run.cfg
    flat = cfg.flat()
    lines = [f"### `{name}`: {flat['model']} on {flat['dataset']}, layer {man['layer']}, {man['pooling']} pooling, "
             f"fine-tuning {_tuning(man)}, test accuracy {meas['classifier_accuracy']['test']:.3f}, "
             f"{rows['text_index'].nunique()} sentences × {rows['seed'].nunique()} seeds", ""]
    ig = meas.get("integrated_gradients", {})
    if ig:
        lines += [f"Integrated Gradients: {ig['steps']} steps, completeness error {100 * ig['completeness_error_mean']:.3f}% "
                  f"mean, {100 * ig['completeness_error_max']:.3f}% max over {ig['n']} sentences.", ""]
    stages = {k: v.get("wall_s") for k, v in man["stages"].items()}
    lines += ["Stage times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items() if v is not None)
              + f"; all {sum(v for v in stages.values() if v):.0f} s.", ""]
    matched = read_parquet(run.dir / "eval" / "matched.parquet")  # the build's own intervals
    # the prediction concept's controls: its matched cuts and, where the build drew it, the class direction
    pred_controls = [*MATCHED[PREDICTION], *(c for c in CLASS_CONTROLS[PREDICTION] if c in set(rows["target"]))]
    specs = [(f"{t} − {c}", rows, matched, t, c, True) for t, c in
             [(PREDICTION, c) for c in pred_controls] + [(SALIENT, c) for c in MATCHED[SALIENT]]]
    by_class = _optional(run, "matched_by_class.parquet")
    for c in sorted(rows["predicted"].unique()) if not by_class.empty else []:  # effects can differ by class
        specs += [(f"{PREDICTION} − {m}, predicted {run.class_names[int(c)]}", rows[rows["predicted"] == c],
                   by_class[by_class["predicted"] == c], PREDICTION, m, True) for m in pred_controls]
    ins_rows, ins_table = run.instrument_rows(), _optional(run, "instrument.parquet")
    if not ins_rows.empty:
        for measure, alpha in ((ins.DOSE, 0.5), (ins.PROBE, 1.0)):
            r, t = _at(ins_rows, measure, alpha), _at(ins_table, measure, alpha)
            specs += [(f"{measure}{' α = 0.5' if measure == ins.DOSE else ''}: {PREDICTION} − {c}", r, t, PREDICTION,
                       c, True) for c in MATCHED[PREDICTION]]
        for measure in (ins.COMPREHENSIVENESS, ins.SUFFICIENCY):  # sufficiency: a smaller drop is better
            specs.append((f"{measure}: {ins.CONCEPT_WORDS} − as many random words", _at(ins_rows, measure, 1.0),
                          _at(ins_table, measure, 1.0), ins.CONCEPT_WORDS, ins.RANDOM_WORDS[ins.CONCEPT_WORDS],
                          measure == ins.COMPREHENSIVENESS))
    head = "| measure | " + " | ".join(NAMES.get(m, m) for m in methods) + " | VQLC against the others |"
    lines += [head, "|---|" + "---:|" * len(methods) + "---|"]
    verdicts = {}
    for label, source, table, target, control, higher in specs:
        diffs = {m: _per_pair(source, m, target, control) for m in methods}
        cells = [next((_fmt((r.diff_conf_drop, r.diff_conf_drop_low, r.diff_conf_drop_high)) for r in table.itertuples()
                       if (r.method, r.target, r.control) == (m, target, control)), "–") for m in methods]
        verdict = verdict_of(diffs, cfg.seed, (name, label), higher)
        verdicts[label] = verdict
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {verdict} |")
    salient = _at(ins_table, ins.COMPREHENSIVENESS, 1.0), _at(ins_table, ins.SUFFICIENCY, 1.0)
    got = [next((f"{m} {_fmt((r.diff_conf_drop, r.diff_conf_drop_low, r.diff_conf_drop_high))}" for r in t.itertuples()
                 if r.method == ins.ATTRIBUTION), None) for m, t in zip(("comprehensiveness", "sufficiency"), salient)]
    if all(got):
        lines += ["", "ERASER for the Integrated Gradients salient words against as many random words (shared by every "
                  f"method): {got[0]}; {got[1]}."]
    lines.append("")
    lines += ["| method | codebook use (concepts with members) | mean purity | prediction purity | fit time (s) | "
              "peak RSS (MB) |", "|---|---:|---:|---:|---:|---:|"]
    for m in methods:
        mm = meas["methods"].get(m, {})
        used = man["stages"].get(m, {}).get("used_concepts")
        lines.append(f"| {NAMES.get(m, m)} | {used if used is not None else '—'} | {mm.get('mean_purity', float('nan')):.3f} | "
                     f"{mm.get('test_prediction_purity', float('nan')):.3f} | {mm.get('fit_time_s', float('nan')):.1f} | "
                     f"{mm.get('peak_rss_mb', float('nan')):.0f} |")
    lines.append("")
    return lines, verdicts


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True, help="built runs, one per setting")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "four-settings.md"), help="the Markdown file to write")
    ap.add_argument("--title", default="The comparison over settings", help="the page's title")
    ap.add_argument("--intro", default="", help="a paragraph under the title: what the runs are")
    args = ap.parse_args(argv)
    command = " ".join(["python bench/four_settings.py --runs", *args.runs]
                       + ([f"--title '{args.title}'"] if args.title != "The comparison over settings" else []))
    lines = [f"# {args.title}", "", *([args.intro, ""] if args.intro else []), f"`{command}`", "",
             "Every ablation on this page removes a concept's centred direction at every position of layer l (the "
             "global intervention), as the paper's faithfulness measure does; the explanation of one input on the "
             "Explain page removes it only where the concept's words are (the local intervention, "
             "[concept attribution](attribution.md)).", ""]
    tally: dict = {}
    for name in args.runs:
        got, verdicts = setting(name)
        lines += got
        for k, v in verdicts.items():
            tally.setdefault(k, []).append(v)
    lines += ["## VQLC best, level or behind, per measure", "", "| measure | best | level | behind |", "|---|---:|---:|---:|"]
    for label, vs in tally.items():
        lines.append(f"| {label} | {vs.count('VQLC best')} | {vs.count('level')} | {vs.count('VQLC behind')} "
                     f"(of {len(vs)}) |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
