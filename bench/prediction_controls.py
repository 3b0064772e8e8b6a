"""The prediction concept against its controls, and the names' detection scores, on built runs:
docs/results/prediction-concept.md, written only by this script.

Per run and method, from the evaluate stage's own tables (eval/matched.parquet and
eval/matched_by_class.parquet: every seed, the crossed bootstrap's 95% intervals): the drop in the
predicted class's probability when the prediction concept is ablated, minus the drop for the
energy-matched other prediction concept, the energy-matched random direction, and the class
direction (the centred mean of the train predictions of the sentence's predicted class). Then,
where bench/name_detection.py stored them, the word concepts' name detection scores.

Usage: python bench/prediction_controls.py --runs default decoder
Writes docs/results/prediction-concept.md and bench/results/prediction_controls.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
from pathlib import Path

from results_io import provenance, write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "results" / "prediction-concept.md"
NAMES = {"vqlc": "VQLC", "kmeans": "K-Means", "lacoat": "LACOAT", "sae": "SAE"}


def _cell(r) -> str:
    return f"{r.diff_conf_drop:+.3f} [{r.diff_conf_drop_low:+.3f}, {r.diff_conf_drop_high:+.3f}]"


def run_section(name: str) -> tuple[list[str], list[dict]]:
    """The markdown lines and the JSON rows of one run's prediction concept against its controls."""
    import vqlc_core as vq
    from vqlc_core.base.runio import read_parquet
    from vqlc_core.evaluate.faithfulness import PREDICTION

    run = vq.open_run(name)
    overall = read_parquet(run.dir / "eval" / "matched.parquet")
    by_class = read_parquet(run.dir / "eval" / "matched_by_class.parquet")
    rows_file = read_parquet(run.dir / "eval" / "faithfulness_rows.parquet")
    n_sent, n_seeds = rows_file["text_index"].nunique(), rows_file["seed"].nunique()
    lines = [f"## `{name}`", "", f"{run.cfg.flat()['model']} on {run.cfg.flat()['dataset']}, {n_sent} test sentences × "
             f"{n_seeds} seeds. Each cell: the prediction concept's drop minus the control's, mean [95% interval].", ""]
    controls = list(dict.fromkeys(overall.loc[overall["target"] == PREDICTION, "control"]))
    methods = [m for m in run.methods_built() if m in set(overall["method"])]
    groups = [("all", overall)] + [(f"predicted {run.class_names[int(c)]}", by_class[by_class["predicted"] == c])
                                   for c in sorted(by_class["predicted"].unique())]
    lines += ["| sentences | minus | " + " | ".join(NAMES.get(m, m) for m in methods) + " |",
              "|---|---|" + "---:|" * len(methods)]
    out = []
    for label, df in groups:
        for control in controls:
            cells = []
            for m in methods:
                hit = df[(df["method"] == m) & (df["target"] == PREDICTION) & (df["control"] == control)]
                cells.append(_cell(next(hit.itertuples())) if len(hit) else "–")
                for r in hit.itertuples():
                    out.append({"run": name, "sentences": label, "method": m, "control": control,
                                "diff": r.diff_conf_drop, "low": r.diff_conf_drop_low, "high": r.diff_conf_drop_high,
                                "n_pairs": int(r.n_pairs)})
            lines.append(f"| {label} | {control.split(': ')[-1]} | " + " | ".join(cells) + " |")
    return lines + [""], out


def names_section(name: str) -> list[str]:
    path = RESULTS / f"name_detection_{name}.json"
    if not path.exists():
        return []
    got = json.loads(path.read_text())
    prov = got.get("provenance", {})
    lines = [f"### Names on `{name}`", "",
             f"`{prov.get('command', '')}` at {prov.get('commit', '?')}, {prov.get('date', '?')}. Detection score of a "
             f"word concept's {got['words']} name words on the test split's word rows (balanced accuracy: its members "
             "against as many other rows; 0.5 tells nothing), mean over concepts [95% interval].", "",
             "| method | concepts | c-TF-IDF names (shown) | frequency names | difference | same name |",
             "|---|---:|---:|---:|---:|---:|"]
    f = lambda d: f"{d['mean']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"  # noqa: E731
    for m, r in got["methods"].items():
        lines.append(f"| {NAMES.get(m, m)} | {r['concepts']} | {f(r['c-TF-IDF'])} | {f(r['frequency'])} | "
                     f"{f(r['difference'])} | {100 * r['same_name_share']:.0f}% |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=["default", "decoder"], help="built runs (default: default decoder)")
    args = ap.parse_args()
    prov = provenance()
    lines = ["# The prediction concept against the class", "",
             f"Generated by `{prov['command']}` at commit {prov['commit']}, {prov['date']}, on {prov['machine']}.", "",
             "Every ablation here removes the concept's centred direction at every position of layer l (the global "
             "intervention of the faithfulness tables).", "",
             "A prediction concept is the concept the pooled prediction representation falls into. Its "
             "energy-matched concept is drawn from the method's other concepts that hold train predictions; the "
             "class direction is the mean of the train predictions the model gave the sentence's predicted class, "
             "centred on the train mean (not matched in energy). At or below zero against the class direction, a "
             "prediction concept says no more than the predicted class.", ""]
    rows = []
    for name in args.runs:
        got, out = run_section(name)
        lines += got + names_section(name)
        rows += out
    PAGE.write_text("\n".join(lines).rstrip("\n") + "\n")
    write_result(RESULTS / "prediction_controls.json", {"runs": args.runs, "rows": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
