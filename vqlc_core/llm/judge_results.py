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
    return (f"the letter a concept was shown under explains {percent(pos.get('eta_squared'))} of the ratings' variance "
            f"(mean rating by letter: {letters}); {percent(j.get('copied_reasons'))} of its reasons repeat the worked "
            f"example's; it rated {percent(j.get('identical_rated_alike'))} of identical concepts alike.")


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
        pairs = "; ".join(f"{k}: ρ = {decimal(v['spearman'])} ({v['items']} items)" for k, v in a["pairwise"].items())
        lines += ["", f"Agreement over {a['items']} items: Kendall's W = {decimal(a['kendalls_w'])} "
                      f"({a['items_all_judges']} items every judge rated), Krippendorff's α (ordinal) = "
                      f"{decimal(a['krippendorff_alpha'])}; pairwise Spearman: {pairs}."]
    return "\n".join(lines) + "\n"
