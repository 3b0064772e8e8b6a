"""The result tables of a run as markdown, for the README or a paper: the run itself (model,
fine-tuning, accuracy, stage times), faithfulness with 95% intervals and the energy each
ablation removed, paired differences between methods, and the concepts' measures.
`vqlc report --run NAME` prints them.
"""

from __future__ import annotations

import math

import pandas as pd

from vqlc_core.evaluate.faithfulness import (CLASS_DIRECTION, CONTROL, GLOBAL_MEAN, PREDICTION, RANDOM_CONCEPT, SALIENT,
                                             TARGETS)
from vqlc_core.evaluate.instrument import ATTRIBUTION, COMPREHENSIVENESS, SUFFICIENCY
from vqlc_core.evaluate.tag_alignment import ALIGN_THRESHOLD, alignment_markdown
from vqlc_core.base.runio import RunError, read_json, read_parquet
from vqlc_core.methods.base import display_name
from vqlc_core.methods.registry import method_class


def _num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}".replace("-", "−")


def _interval(mean, low, high, digits: int = 3) -> str:
    return f"{_num(mean, digits)} [{_num(low, digits)}, {_num(high, digits)}]"


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def summary_line(run) -> str:
    """One paragraph: model, layer, data, fine-tuning, accuracy and the time of each stage."""
    cfg, stages = run.cfg, run.manifest.data["stages"]
    acc = read_json(run.dir / "classifier" / "metrics.json")["accuracy"]
    ft = stages.get("finetune", {})
    mode = ft.get("mode", "none")
    tuned = (f"fine-tuned ({mode}, epoch {ft.get('chosen_epoch')} chosen by dev accuracy)" if mode != "none"
             else "frozen, linear head")
    times = ", ".join(f"{s} {stages[s]['wall_s']:.0f} s" for s in run.stage_order() if "wall_s" in stages.get(s, {}))
    total = sum(stages[s].get("wall_s", 0) for s in run.stage_order() if s in stages)
    seeds = cfg.method_seeds
    measures_path = run.dir / "eval" / "measures.json"
    ig = read_json(measures_path).get("integrated_gradients", {}) if measures_path.exists() else {}
    ig_text = (f" Integrated Gradients: {ig['steps']} steps, completeness error {100 * ig['completeness_error_mean']:.3f}% "
               f"mean, {100 * ig['completeness_error_max']:.3f}% max over {ig['n']} test sentences."
               if ig.get("n") else "")
    built = [m for m in run.methods_built() if not method_class(m).encodes  # an SAE has its own latent count
             and (run.dir / "methods" / m / "concepts.json").exists()]
    extra = (read_json(run.dir / "methods" / built[0] / "concepts.json")["n_concepts"] - cfg.methods.n_concepts
             if built else 0)  # as built: a run built before prediction concepts existed has none
    kp = f" + {extra} prediction concepts" if extra > 0 else " (one set for words and predictions)"
    return (f"**{run.dir.name}**: {cfg.extract.model}, layer {run.layer}, {run.manifest.data.get('pooling')} pooling, "
            f"{cfg.data.dataset} ({run.store.n_rows:,} rows), {tuned}; K = {cfg.methods.n_concepts}{kp}, "
            f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))}). "
            f"Test accuracy {acc.get('test', float('nan')):.3f} (dev {acc.get('dev', float('nan')):.3f}). "
            f"Stages {total / 60:.1f} min (each stage's last build, pauses included): {times}.{ig_text}")


def faithfulness_table(run) -> str:
    return _md(_faithfulness_frame(read_parquet(run.dir / "eval" / "faithfulness.parquet")))


def _faithfulness_frame(df: pd.DataFrame, predicted: list[str] | None = None) -> pd.DataFrame:
    """`summarize_faithfulness` rows as display columns (with a `predicted` class column when given)."""
    return pd.DataFrame({
        "method": df["method"].map(lambda m: display_name(m)),
        "target": df["target"],
        **({"predicted": predicted} if predicted is not None else {}),
        "sentences × seeds": [f"{int(a)} × {int(b)}" for a, b in zip(df["n_sentences"], df["n_seeds"])],
        "mean Δconfidence [95% CI]": [_interval(*r) for r in zip(df["mean_conf_drop"], df["conf_drop_low"],
                                                                  df["conf_drop_high"])],
        "flip rate [95% CI]": [_interval(*r) for r in zip(df["flip_rate"], df["flip_rate_low"], df["flip_rate_high"])],
        "energy removed": [_num(e) for e in df["mean_energy"]],
    })


def paired_table(run) -> str:
    path = run.dir / "eval" / "paired.parquet"
    df = read_parquet(path) if path.exists() else pd.DataFrame()
    if not df.empty:  # the concept targets; methods are compared against their own controls in matched_table
        df = df[df["target"].isin(TARGETS)]
    if df.empty:
        return "(no paired differences: VQLC and another method are needed)"
    out = pd.DataFrame({
        "difference": [f"{display_name(a)} − {display_name(b)}" for a, b in zip(df["method_a"], df["method_b"])],
        "target": df["target"],
        "Δconfidence drop [95% CI]": [_interval(*r) for r in zip(df["diff_conf_drop"], df["diff_conf_drop_low"],
                                                                   df["diff_conf_drop_high"])],
        "flip rate difference [95% CI]": [_interval(*r) for r in zip(df["diff_flip_rate"], df["diff_flip_rate_low"],
                                                                       df["diff_flip_rate_high"])],
    })
    return _md(out)


def _read_optional(run, name: str) -> pd.DataFrame:
    path = run.dir / "eval" / name
    return read_parquet(path) if path.exists() else pd.DataFrame()


def _class_name(run, c) -> str:
    names = run.class_names
    return names[int(c)] if 0 <= int(c) < len(names) else str(c)


def matched_table(run, by_class: bool = False) -> str:
    """Each method's prediction and salient-word concepts minus their energy-matched controls
    (`faithfulness.matched_differences`), with both energies; per predicted class with by_class."""
    df = _read_optional(run, "matched_by_class.parquet" if by_class else "matched.parquet")
    if df.empty:
        return "(no energy-matched controls: rebuild the evaluate stage)"
    out = pd.DataFrame({
        "method": df["method"].map(lambda m: display_name(m)),
        "target": df["target"],
        "minus control": df["control"].str.split(": ").str[-1],
        **({"predicted": [_class_name(run, c) for c in df["predicted"]]} if by_class else {}),
        "Δconfidence drop [95% CI]": [_interval(*r) for r in zip(df["diff_conf_drop"], df["diff_conf_drop_low"],
                                                                   df["diff_conf_drop_high"])],
        "flip rate difference [95% CI]": [_interval(*r) for r in zip(df["diff_flip_rate"], df["diff_flip_rate_low"],
                                                                       df["diff_flip_rate_high"])],
        "energy target / control": [f"{_num(a)} / {_num(b)}" for a, b in zip(df["energy_a"], df["energy_b"])],
    })
    return _md(out)


def instrument_table(run, by_class: bool = False) -> str:
    """The instruments beside the single cut (`instrument.instrument_differences`): the prediction
    concept cut by a fraction α against its matched cuts, the probe, and ERASER comprehensiveness
    and sufficiency of the salient and concept words against as many random words."""
    df = _read_optional(run, "instrument_by_class.parquet" if by_class else "instrument.parquet")
    if df.empty:
        return "(no instruments: rebuild the evaluate stage with --instrument-texts above 0)"
    eraser = df["measure"].isin([COMPREHENSIVENESS, SUFFICIENCY])
    out = pd.DataFrame({
        "measure": df["measure"], "α": [f"{a:g}" for a in df["alpha"]],
        "method": df["method"].map(lambda m: "IG salient words" if m == ATTRIBUTION else display_name(m)),
        "target − control": df["target"] + " − " + df["control"].str.split(": ").str[-1],
        **({"predicted": [_class_name(run, c) for c in df["predicted"]]} if by_class else {}),
        "Δ [95% CI]": [_interval(*r) for r in zip(df["diff_conf_drop"], df["diff_conf_drop_low"],
                                                   df["diff_conf_drop_high"])],
        "energy or words, target / control": [f"{_num(a, 1 if e else 3)} / {_num(b, 1 if e else 3)}"
                                              for a, b, e in zip(df["energy_a"], df["energy_b"], eraser)],
    })
    return _md(out)


def beyond_the_class(run, method: str) -> dict | None:
    """What the method's prediction concept adds beyond the predicted class, from the evaluate
    stage's table: its drop minus the class direction's on the same test sentences and seeds
    (diff, low, high: the 95% interval), whether the interval lies above zero (adds), and one
    sentence that says so. None where the run has no class-direction row (built before it)."""
    df = _read_optional(run, "matched.parquet")
    if df.empty:
        return None
    hit = df[(df["method"] == method) & (df["target"] == PREDICTION) & (df["control"] == CLASS_DIRECTION)]
    if hit.empty:
        return None
    r = hit.iloc[0]
    diff, low, high = float(r["diff_conf_drop"]), float(r["diff_conf_drop_low"]), float(r["diff_conf_drop_high"])
    adds = low > 0
    said = "more than" if adds else "not measurably more than" if high >= 0 else "less than"
    sentence = (f"On {int(r['n_sentences'])} test sentences ({int(r['n_seeds'])} seed(s)), ablating "
                f"{display_name(method)}'s prediction concept lowers the predicted class's probability {said} ablating "
                f"the class direction (the centred mean of the train predictions of that class): "
                f"{_interval(diff, low, high)}.")
    return {"diff": diff, "low": low, "high": high, "adds": adds, "sentence": sentence}


def by_class_table(run) -> str:
    """The faithfulness table's concept targets per predicted class."""
    df = _read_optional(run, "faithfulness_by_class.parquet")
    if df.empty:
        return "(no per-class rows: rebuild the evaluate stage)"
    df = df[df["target"].isin([PREDICTION, SALIENT, GLOBAL_MEAN])]
    return _md(_faithfulness_frame(df, [_class_name(run, c) for c in df["predicted"]]))


def baseline_line(run) -> str:
    """What the classifier predicts from Integrated Gradients' baseline, and IG's completeness."""
    measures_path = run.dir / "eval" / "measures.json"
    ig = read_json(measures_path).get("integrated_gradients", {}) if measures_path.exists() else {}
    if "baseline_proba_mean" not in ig:
        return ""
    mean = ", ".join(f"{_class_name(run, c)} {p:.3f}" for c, p in enumerate(ig["baseline_proba_mean"]))
    per = ", ".join(f"predicted {_class_name(run, c)}: {p:.3f}" for c, p in ig["baseline_proba_of_predicted"].items())
    return (f"Integrated Gradients' baseline ({ig.get('baseline') or 'train mean'}): the classifier run on from it "
            f"predicts {mean} on average over the {ig['n']} test sentences; its probability of the sentence's "
            f"predicted class: {per}. Completeness error {100 * ig['completeness_error_mean']:.3f}% mean, "
            f"{100 * ig['completeness_error_max']:.3f}% max.")


def concepts_table(run) -> str:
    m = read_json(run.dir / "eval" / "measures.json")["methods"]
    rows = []
    for name, v in m.items():
        rows.append({
            "method": display_name(name),
            "test prediction concepts": v.get("test_prediction_distinct"),
            "in a concept of mostly predictions": _num(v.get("test_prediction_mostly_predictions"), 2),
            "their purity": _num(v.get("test_prediction_purity"), 2),
            "by predicted class": _num(v.get("test_prediction_predicted_purity"), 2),
            "largest share": _num(v.get("test_prediction_largest_share"), 2),
            "dev R² (concept vector)": _num(v.get("dev_centroid_r2")),
            "dev R² (decoder)": _num(v.get("dev_r2")) if "dev_r2" in v else "–",
            "perplexity all / fit set": f"{_num(v.get('perplexity'), 0)} / {_num(v.get('fitset_perplexity'), 0)}",
            "dead all / fit set": f"{v.get('dead_codes', '–')} / {v.get('fitset_dead_codes', '–')}",
            "seed AMI": _num(v.get("seed_ami_mean"), 2) if "seed_ami_mean" in v else "–",
            "fit s": _num(v.get("fit_time_s"), 1),
            "peak MB": _num(v.get("peak_rss_mb"), 0),
        })
    return _md(pd.DataFrame(rows))


def calibration_table(run) -> str:
    """Per method, the reliability on dev of the probability shown beside a prediction concept
    (`methods/calibration.py`): per bin of the shown probability, dev predictions, its mean and
    the mean share of their nearest train predictions in that concept; ECE before and after."""
    m = read_json(run.dir / "eval" / "measures.json")["methods"]
    rows = []
    for name, v in m.items():
        cal = v.get("calibration") or {}
        for r in cal.get("reliability_calibrated", []):
            rows.append({"method": display_name(name), "shown p": f"{r['low']:.1f}–{r['high']:.1f}",
                         "dev predictions": r["n"], "mean shown p": _num(r["mean_p"], 3) if r["n"] else "–",
                         "share of nearest train predictions in it": _num(r["observed"], 3) if r["n"] else "–",
                         "ECE raw → calibrated": f"{_num(cal['ece_raw'], 3)} → {_num(cal['ece_calibrated'], 3)}",
                         "temperature": _num(cal["temperature"], 3)})
    return _md(pd.DataFrame(rows)) if rows else ""


def run_tables(run, align_threshold: float = ALIGN_THRESHOLD) -> str:
    """Every table of a finished run, as markdown (the tag alignment at `align_threshold`)."""
    if not run.manifest.is_complete("evaluate"):
        raise RunError(f"Run '{run.dir.name}' has no finished 'evaluate' stage; build it first with "
                       f"`vqlc build --run {run.dir.name}`.")
    parts = [summary_line(run), baseline_line(run), "Faithfulness (ablation at layer l, per test sentence and seed):",
             faithfulness_table(run),
             "Against energy-matched controls (target minus control, same sentences and seeds; the control is the "
             "other concept(s) of the same method, for the prediction concept another concept that holds train "
             "predictions, or the N(0, Σ_train) direction(s), whose ablation removes the energy closest to the "
             "target's; and for the prediction concept the class direction, the centred mean of the train "
             "predictions of the sentence's predicted class, which is not matched in energy):", matched_table(run),
             "Against energy-matched controls, per predicted class:", matched_table(run, by_class=True),
             "Beyond the single cut (the prediction concept cut by a fraction α, a probe of the pooled states, "
             "ERASER comprehensiveness and sufficiency; target minus control):", instrument_table(run),
             "Beyond the single cut, per predicted class:", instrument_table(run, by_class=True),
             "Faithfulness per predicted class:", by_class_table(run),
             "Paired differences (same sentences and seeds):", paired_table(run), "Concepts:", concepts_table(run),
             "The probability shown beside a prediction concept, its reliability on dev:", calibration_table(run),
             alignment_markdown(run, align_threshold)]
    return "\n\n".join(p for p in parts if p) + "\n"


def _faith_cell(faith: pd.DataFrame, method: str, target: str) -> str:
    if (method, target) not in faith.index:
        return "–"
    r = faith.loc[(method, target)]
    return f"{_interval(r['mean_conf_drop'], r['conf_drop_low'], r['conf_drop_high'])} ({_num(r['mean_energy'], 2)})"


def compare_table(runs) -> str:
    """Finished runs side by side (e.g. a frozen and a fine-tuned model): per run and method, the
    test accuracy, how the test prediction representations fall into concepts, and the
    faithfulness of the prediction and salient-word concepts against the controls (mean
    confidence drop [95% CI] and, in brackets, the energy removed); then each run's stage times."""
    rows, times = [], []
    for run in runs:
        if not run.manifest.is_complete("evaluate"):
            raise RunError(f"Run '{run.dir.name}' has no finished 'evaluate' stage; build it first with "
                           f"`vqlc build --run {run.dir.name}`.")
        stages = run.manifest.data["stages"]
        measures = read_json(run.dir / "eval" / "measures.json")
        faith = read_parquet(run.dir / "eval" / "faithfulness.parquet").set_index(["method", "target"])
        mode = stages.get("finetune", {}).get("mode", "none")
        for m, v in measures["methods"].items():
            rows.append({
                "run": run.dir.name, "model": f"{run.cfg.extract.model}, {'frozen' if mode == 'none' else mode}",
                "test acc.": _num(measures["classifier_accuracy"].get("test"), 3), "method": display_name(m),
                "seeds": len(measures.get("seeds", [0])),
                "test prediction concepts (purity, largest share)":
                    f"{v.get('test_prediction_distinct')} ({_num(v.get('test_prediction_purity'), 2)}, "
                    f"{_num(v.get('test_prediction_largest_share'), 2)})",
                f"{PREDICTION} Δconf (energy)": _faith_cell(faith, m, PREDICTION),
                f"{SALIENT} Δconf (energy)": _faith_cell(faith, m, SALIENT),
                f"{RANDOM_CONCEPT} Δconf (energy)": _faith_cell(faith, m, RANDOM_CONCEPT),
                f"{GLOBAL_MEAN} Δconf (energy)": _faith_cell(faith, CONTROL, GLOBAL_MEAN),
            })
        walls = {s: stages[s]["wall_s"] for s in run.stage_order() if "wall_s" in stages.get(s, {})}
        methods = [s for s in walls if s in measures["methods"]]
        times.append({"run": run.dir.name, "finetune s": _num(walls.get("finetune"), 0),
                      "extract s": _num(walls.get("extract"), 0),
                      "methods s": _num(sum(walls[s] for s in methods), 0),
                      "evaluate s": _num(walls.get("evaluate"), 0), "maps s": _num(walls.get("maps"), 0),
                      "all stages min": _num(sum(walls.values()) / 60, 1)})
    return _md(pd.DataFrame(rows)) + "\n\nStage times (each stage's last build):\n\n" + _md(pd.DataFrame(times)) + "\n"
