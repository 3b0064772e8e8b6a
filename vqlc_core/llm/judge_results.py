"""What `vqlc judge` wrote, read back and shown: `<run>/llm/judge.json` (per judge, its parse
rate, checks and method table; across judges, their agreement) and the ratings with their
reasons in `<run>/llm/judge_ratings.parquet`; the results as markdown.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vqlc_core.base.markdown import markdown_table
from vqlc_core.base.runio import RunError, read_json, read_parquet
from vqlc_core.llm.runfacts import concepts_digest

RATING_COLUMNS = ["judge", "text_id", "stratum", "label", "prediction", "method", "role", "concept", "word", "letter",
                  "view", "rating", "reason", "parsed", "finish_reason", "text"]
TABLE_HEADER = ["judge", "parse rate", "role", "method", "n", "mean rating [95% CI]", "rank", "from the letters alone"]


def load_results(run_dir: str | Path) -> tuple[dict, pd.DataFrame] | None:
    """What the last `vqlc judge` of the run wrote (judge.json and its ratings), or None when no
    judge has run; a file that cannot be read is one sentence."""
    folder = Path(run_dir) / "llm"
    if not (folder / "judge.json").exists():
        return None
    try:
        res = read_json(folder / "judge.json")
        ratings = read_parquet(folder / "judge_ratings.parquet")
        if not isinstance(res, dict) or "judges" not in res or not set(RATING_COLUMNS) <= set(ratings.columns):
            raise RunError("missing keys or columns")
    except (OSError, ValueError) as err:
        raise RunError(f"The judge's results in {folder} cannot be read ({err.__class__.__name__}); run "
                       "`vqlc judge` again.") from err
    return res, ratings


def stale_methods(run_dir: str | Path, res: dict) -> list[str]:
    """The judged methods whose concepts were rebuilt since the judge rated them (a result that
    predates digests is taken as current)."""
    return [m for m, d in (res.get("concepts") or {}).items() if d is not None and d != concepts_digest(run_dir, m)]


def percent(v: float | None) -> str:
    """A share as a whole percentage, '–' when there is none."""
    return "–" if v is None else f"{v:.0%}"


def judge_checks(j: dict) -> str:
    """One judge's checks in a sentence: the letter effect, copied reasons, identical concepts."""
    pos = j.get("position") or {}
    letters = ", ".join(f"{k} {v:.2f}" for k, v in (pos.get("by_letter") or {}).items())
    eta, copied, alike = pos.get("eta_squared"), j.get("copied_reasons"), j.get("identical_rated_alike")
    letter = ("all its ratings are equal, so no letter effect can be measured" if eta is None else
              f"the letter a concept was shown under explains {percent(eta)} of the ratings' variance")
    return (f"{letter} (mean rating by letter: {letters}); "
            + ("it gave no reason" if copied is None else f"{percent(copied)} of its reasons repeat the worked example's")
            + "; " + ("no identical concepts were judged" if alike is None else
                      f"it rated {percent(alike)} of identical concepts alike") + ".")


def decimal(v: float | None) -> str:
    """A statistic to two decimals, '–' when there is none."""
    return "–" if v is None else f"{v:.2f}"


def judge_table(res: dict) -> str:
    """The results as markdown: one row per judge, role and method, then the agreement."""
    rows, checks = [], []
    for name, j in res["judges"].items():
        rate = f"{j['parsed']}/{j['requests']}"
        if not j["table"]:
            rows.append([name, rate, "–", "–", 0, "–", "–", "–"])
        for row in j["table"]:
            ci = f"{row['mean']:.2f} [{row['low']:.2f}, {row['high']:.2f}]" if row["mean"] is not None else "–"
            alone = "–" if row.get("from_letters") is None else f"{row['from_letters']:.2f}"
            rows.append([name, rate, row["role"], row["method"], row["n"], ci, f"{row['rank']:g}", alone])
        if j.get("position"):
            checks.append(f"{name}: {judge_checks(j)}")
    lines = [markdown_table(TABLE_HEADER, rows, numeric={1, 4, 5, 6, 7})]
    if checks:
        lines += ["", "Checks on each judge (a judge that reads the concepts has a small letter effect, its own "
                      "reasons, and rates identical concepts alike): " + " ".join(checks)]
    a = res.get("agreement")
    if a:
        lines += ["", agreement_line(a)]
    return "\n".join(lines) + "\n"


def _stat(v: float | None) -> str:
    return "undefined" if v is None else f"{v:.2f}"


def _statistics(a: dict, alpha: str) -> str:
    pairs = "; ".join(f"{k}: ρ = {_stat(v['spearman'])} ({v['items']} items)" for k, v in a["pairwise"].items())
    return (f"Kendall's W = {_stat(a['kendalls_w'])}, Krippendorff's α ({alpha}) = {_stat(a['krippendorff_alpha'])}; "
            f"pairwise Spearman: {pairs}")


def position_bias_note(a: dict) -> str | None:
    """A sentence saying the judges' agreement is their shared position bias, when the letter
    explains most of the variance of two or more of them (None otherwise, or for results written
    before letter effects were kept)."""
    if not a.get("shared_position_bias"):
        return None
    effect = a["letter_effect"]
    judges = " and ".join(f"{j} ({percent(effect[j])})" for j in a["position_biased"])
    return (f"The letter a concept was shown under explains most of the ratings' variance of {judges}, so their "
            f"agreement reflects the position bias they share more than how they read the concepts.")


def agreement_line(a: dict) -> str:
    """The agreement between judges in words: the statistics, each judge's letter effect beside
    them with the position-bias sentence where it applies, and the agreement left once each
    judge's mean rating per letter is removed ("undefined" where no rating varies)."""
    line = f"Agreement over {a['items']} items ({a['items_all_judges']} rated by every judge): {_statistics(a, 'ordinal')}."
    effect = a.get("letter_effect")
    if effect is None:  # results written before letter effects were kept
        return line
    note = position_bias_note(a)
    line += " " + (note or "Letter effect (variance explained by the letter): " + ", ".join(
        f"{j} {percent(v) if v is not None else 'none measurable'}" for j, v in effect.items()) + ".")
    residual = _statistics(a["residual"], "interval")
    undefined = " (undefined: no rating varies once the letters' means are removed)" if "undefined" in residual else ""
    return line + f" After removing each judge's mean rating per letter: {residual}{undefined}."
