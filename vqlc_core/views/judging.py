"""What the Judges and Labels pages show, prepared from what `vqlc judge` and `vqlc label` wrote
for a run: per judge its checks and its method table with error bars, the agreement between
judges, the judged sentences filtered by judge and stratum with every rating and reason, and
per method its labels with their counts. The pages only render these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vqlc_core.llm.judge_results import decimal, load_results, percent, position_bias_note, stale_methods
from vqlc_core.llm.labels import labels_frame, read_labels
from vqlc_core.views.charts import error_bars

TABLE_COLUMNS = ("role", "method", "n", "mean", "low", "high", "rank", "from_letters")  # a judge's table, shown
RATING_COLUMNS = ["judge", "letter", "method", "role", "concept", "word", "view", "rating", "reason"]  # a sentence's
CAPTION_CHARS = 90  # of a sentence in the list to choose from


# --- judges -------------------------------------------------------------------------------------

@dataclass
class JudgeView:
    """One judge as the Judges page shows it."""

    name: str
    source: str  # its model and where it ran
    parse_rate: str
    parsed: int
    requests: int
    unparseable: int
    identical_alike: str
    letter_variance: str  # the share of the ratings' variance the letters explain
    copied_reasons: str
    by_letter: str | None  # the mean rating by letter, "A 2.00, B 1.50"; None when nothing parsed
    table: pd.DataFrame  # per role and method: n, mean, 95% interval, rank, from the letters alone
    bars: pd.DataFrame  # `table` with the error bars' lengths above (plus) and below (minus) the mean


def judge_view(name: str, j: dict) -> JudgeView:
    ep = j.get("endpoint", {})
    position = j.get("position") or {}
    by_letter = position.get("by_letter")
    table = pd.DataFrame(j["table"])
    shown = table[[c for c in TABLE_COLUMNS if c in table]]
    bars = table.assign(**dict(zip(("plus", "minus"), error_bars(table, "mean", "low", "high")))) if len(table) else table
    return JudgeView(name=name, source=f"{ep.get('model', '?')} at {ep.get('server') or ep.get('base_url') or '?'}",
                     parse_rate=percent(j.get("parse_rate")), parsed=j["parsed"], requests=j["requests"],
                     unparseable=j["unparseable"],
                     identical_alike=("none judged" if j.get("identical_rated_alike") is None
                                      else percent(j["identical_rated_alike"])),
                     letter_variance=percent(position.get("eta_squared")),
                     copied_reasons=percent(j.get("copied_reasons")),
                     by_letter=", ".join(f"{k} {v:.2f}" for k, v in by_letter.items()) if by_letter else None,
                     table=shown, bars=bars)


@dataclass
class AgreementView:
    """The agreement between two or more judges, beside each judge's letter effect, and the
    agreement left once each judge's mean rating per letter is removed."""

    kendalls_w: str
    alpha: str  # Krippendorff's, ordinal
    items: int  # rated by any judge
    items_all_judges: int
    pairwise: pd.DataFrame  # judges, Spearman ρ, ρ after the letter means, items
    letter_effects: str  # "a 82%, b 100%": the share of each judge's variance the letter explains
    position_bias: str | None  # the sentence saying the agreement is a shared position bias, where it is
    residual_kendalls_w: str  # after removing each judge's letter means; "undefined" where nothing varies
    residual_alpha: str  # Krippendorff's, interval, on the same


def _stat(v: float | None) -> str:
    return "undefined" if v is None else f"{v:.2f}"


def agreement_view(agreement: dict | None) -> AgreementView | None:
    """None with one judge (no agreement was measured)."""
    if not agreement:
        return None
    residual = agreement.get("residual") or {"pairwise": {}}  # absent from results written before
    pairwise = pd.DataFrame([{"judges": k, "Spearman ρ": v["spearman"],
                              "ρ after letter means": (residual["pairwise"].get(k) or {}).get("spearman"),
                              "items": v["items"]} for k, v in agreement["pairwise"].items()])
    effects = agreement.get("letter_effect") or {}
    return AgreementView(decimal(agreement.get("kendalls_w")), decimal(agreement.get("krippendorff_alpha")),
                         agreement["items"], agreement["items_all_judges"], pairwise,
                         letter_effects=", ".join(f"{j} {percent(v) if v is not None else 'none measurable'}"
                                                  for j, v in effects.items()),
                         position_bias=position_bias_note(agreement),
                         residual_kendalls_w=_stat(residual.get("kendalls_w")),
                         residual_alpha=_stat(residual.get("krippendorff_alpha")))


@dataclass
class JudgeResults:
    """The last `vqlc judge` of a run."""

    ratings: pd.DataFrame  # every rating with its reason (see judge_results.RATING_COLUMNS)
    note: str | None  # what the offline default judge is
    stale: list[str]  # judged methods whose concepts were rebuilt since
    n_sentences: int
    seed: int
    strata: str  # sentences per stratum, "FN 1, TP 3"
    judges: list[JudgeView]
    agreement: AgreementView | None


def judge_results(run_dir: str | Path) -> JudgeResults | None:
    """What the Judges page shows of the run; None when no judge has rated it (a file that
    cannot be read is one sentence, a RunError)."""
    loaded = load_results(run_dir)
    if loaded is None:
        return None
    res, ratings = loaded
    return JudgeResults(ratings=ratings, note=res.get("note"), stale=stale_methods(run_dir, res),
                        n_sentences=res["n_sentences"], seed=res.get("seed", 0),
                        strata=", ".join(f"{k} {v}" for k, v in res.get("strata", {}).items()),
                        judges=[judge_view(name, j) for name, j in res["judges"].items()],
                        agreement=agreement_view(res.get("agreement")))


# --- the judged sentences ------------------------------------------------------------------------

def filter_options(ratings: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The judges and the strata to filter the sentences by."""
    return sorted(ratings["judge"].unique()), sorted(ratings["stratum"].unique())


def filter_ratings(ratings: pd.DataFrame, judges=(), strata=()) -> pd.DataFrame:
    """The ratings of these judges on sentences of these strata (none chosen: all of them)."""
    if judges:
        ratings = ratings[ratings["judge"].isin(judges)]
    if strata:
        ratings = ratings[ratings["stratum"].isin(strata)]
    return ratings


def sentence_choices(ratings: pd.DataFrame) -> dict[int, str]:
    """The sentences rated, in order of appearance: text id -> its stratum and its start."""
    sentences = ratings.drop_duplicates("text_id")[["text_id", "stratum", "text"]]
    return {int(r.text_id): f"{r.stratum} · {r.text[:CAPTION_CHARS]}" for r in sentences.itertuples()}


@dataclass
class SentenceView:
    """One judged sentence and every judge's ratings of the concepts shown for it."""

    text: str
    label: str
    prediction: str
    stratum: str
    answers: list[tuple[str, bool, pd.DataFrame]]  # per judge: its name, whether its answer parsed, its ratings


def sentence_view(ratings: pd.DataFrame, text_id: int) -> SentenceView:
    one = ratings[ratings["text_id"] == text_id]
    first = one.iloc[0]
    answers = [(str(judge), bool(answer["parsed"].any()), answer.sort_values("letter")[RATING_COLUMNS])
               for judge, answer in one.groupby("judge", sort=True)]
    return SentenceView(str(first["text"]), str(first["label"]), str(first["prediction"]), str(first["stratum"]),
                        answers)


# --- labels ----------------------------------------------------------------------------------------

@dataclass
class LabelsView:
    """One method's labels as the Labels page shows them."""

    method: str
    state: str  # 'stale' (labels of an earlier build of the concepts, not shown) or 'current'
    note: str | None  # what the offline default labeller is
    labelled: int
    named: int
    edited: int
    labeller: str  # its model, 'none' when every label was written by hand
    frame: pd.DataFrame  # see labels.labels_frame


def labels_view(run_dir: str | Path, method: str) -> LabelsView | None:
    """None when the method has no labels file (a file that cannot be read is a RunError)."""
    state, entries, meta = read_labels(run_dir, method)
    if state == "none":
        return None
    return LabelsView(method=method, state=state, note=meta.get("note"), labelled=len(entries),
                      named=sum(bool(e.get("name")) for e in entries.values()),
                      edited=sum(bool(e.get("edited")) for e in entries.values()),
                      labeller=(meta.get("labeller") or {}).get("model", "none"), frame=labels_frame(entries))
