"""Which layer to explain? The three methods at several layers of the same fine-tuned model.

For each layer the run `<base>-layer<L>` reuses the base run's texts and fine-tuned weights
(copied, so nothing is trained twice) and builds extraction, the methods (`--methods`, every seed
of the base run) and the evaluation at layer L; the base run's own layer is read from the base run
itself. Per layer and method it reports: the prediction-concept and salient-word confidence
drops with their 95% intervals and the energy they removed, the random-concept control, the
global-mean control, how many distinct concepts the test prediction representations use and
their purity, and dev reconstruction R² (a concept's mean member state).

Usage: python bench/layer_sweep.py [--base default] [--layers 3 5]
The recorded table: `python bench/layer_sweep.py` after `vqlc build --preset default --seeds 0 1 2`
(MiniLM has 6 layers: 3 is the middle one, 5 the second-to-last, the default).
Writes bench/results/layer_sweep.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from vqlc_core.pipeline.build import build
from vqlc_core.pipeline.run import Run
from vqlc_core.base.runio import read_json, read_parquet
from vqlc_core.evaluate.faithfulness import CONTROL, GLOBAL_MEAN, PREDICTION, RANDOM_CONCEPT, SALIENT
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

NAMES = {"vqlc": "VQLC", "kmeans": "K-Means", "lacoat": "LACOAT"}
KEEP = ("texts.parquet", "finetune")  # what a layer run takes from the base run


def layer_run(base: Run, layer: int, methods: list[str]) -> Run:
    """The base run itself at its own layer; otherwise `<base>-layer<L>`, built if needed from a
    copy of the base run's texts and fine-tuned model."""
    if layer == base.layer:
        return base
    cfg = base.rebuild_config().replace(run=f"{base.dir.name}-layer{layer}", layer=layer, methods=tuple(methods))
    if not (cfg.run_dir / "manifest.json").exists():
        cfg.run_dir.mkdir(parents=True)
        for name in KEEP:
            src = base.dir / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, cfg.run_dir / name)
        manifest = read_json(base.dir / "manifest.json")
        manifest["stages"] = {k: v for k, v in manifest["stages"].items() if k in ("texts", "finetune")}
        (cfg.run_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    t0 = time.perf_counter()
    run = build(cfg)
    print(f"layer {layer}: built in {time.perf_counter() - t0:.0f} s", flush=True)
    return run


def rows_of(run: Run, methods: list[str]) -> list[dict]:
    faith = read_parquet(run.dir / "eval" / "faithfulness.parquet").set_index(["method", "target"])
    measures = read_json(run.dir / "eval" / "measures.json")
    out = []
    for m, v in measures["methods"].items():
        if m not in methods:
            continue

        def cell(target, col="mean_conf_drop"):
            return float(faith.loc[(m, target), col]) if (m, target) in faith.index else float("nan")

        out.append({
            "layer": run.layer, "method": m, "seeds": len(measures.get("seeds", [0])),
            "pred_drop": cell(PREDICTION), "pred_low": cell(PREDICTION, "conf_drop_low"),
            "pred_high": cell(PREDICTION, "conf_drop_high"),
            "pred_energy": cell(PREDICTION, "mean_energy"),
            "salient_drop": cell(SALIENT),
            "salient_low": cell(SALIENT, "conf_drop_low"),
            "salient_high": cell(SALIENT, "conf_drop_high"),
            "salient_energy": cell(SALIENT, "mean_energy"),
            "random_concept_drop": cell(RANDOM_CONCEPT),
            "global_mean_drop": float(faith.loc[(CONTROL, GLOBAL_MEAN), "mean_conf_drop"]),
            "test_prediction_distinct": v.get("test_prediction_distinct"),
            "test_prediction_purity": v.get("test_prediction_purity"),
            "dev_centroid_r2": v.get("dev_centroid_r2"),
            "test_accuracy": measures["classifier_accuracy"]["test"],
        })
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| layer | method | seeds | prediction concept Δconf [95% CI] (energy) | salient-word Δconf [95% CI] "
             "(energy) | random concept Δconf | global mean Δconf | test prediction concepts (purity) | dev R² |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {NAMES.get(r['method'], r['method'])} | {r['seeds']} | "
            f"{r['pred_drop']:.3f} [{r['pred_low']:.3f}, {r['pred_high']:.3f}] ({r['pred_energy']:.2f}) | "
            f"{r['salient_drop']:.3f} [{r['salient_low']:.3f}, {r['salient_high']:.3f}] ({r['salient_energy']:.2f}) | "
            f"{r['random_concept_drop']:.3f} | {r['global_mean_drop']:.3f} | "
            f"{r['test_prediction_distinct']} ({r['test_prediction_purity']:.2f}) | {r['dev_centroid_r2']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, key, title in ((axes[0], "pred", PREDICTION), (axes[1], "salient", SALIENT)):
        for m in NAMES:
            rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["layer"])
            if not rs:
                continue
            x = [r["layer"] for r in rs]
            y = [r[f"{key}_drop"] for r in rs]
            err = [[r[f"{key}_drop"] - r[f"{key}_low"] for r in rs], [r[f"{key}_high"] - r[f"{key}_drop"] for r in rs]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=NAMES[m])
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.set_xticks(sorted({r["layer"] for r in rows}))
    axes[0].set_ylabel("mean confidence drop (95% CI)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="default", help="the built run whose texts and fine-tuned model are reused")
    ap.add_argument("--layers", type=int, nargs="+", default=[3, 5], help="layers to compare (default: 3 5)")
    ap.add_argument("--methods", nargs="+", default=["vqlc", "kmeans", "lacoat"],
                    help="the methods to build and compare at each layer (default: vqlc kmeans lacoat)")
    ap.add_argument("--cache-dir", default=str(ROOT / "cache"), help="the cache folder holding runs/ (default: cache)")
    args = ap.parse_args(argv)
    base = Run(Path(args.cache_dir) / "runs" / args.base)
    rows = [r for layer in args.layers for r in rows_of(layer_run(base, layer, args.methods), args.methods)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / "layer_sweep.json", {"base": args.base, "rows": rows})
    md = markdown(rows)
    (RESULTS / "layer_sweep.md").write_text(md)
    plot(rows, RESULTS / "layer_sweep.png")
    print(md)


if __name__ == "__main__":
    main()
