"""LLM judges of the methods' concepts, as the paper's authors rank them: dev sentences sampled
by stratum (`judge_items`), each method's concepts rated 1 (Poor) to 3 (Good) in one JSON answer
per sentence (`judge_prompts`), then per judge a mean and rank per method and across judges
their agreement (`agreement`).

Answers that do not parse are counted and left out, never replaced by a middle rating. Results go
to `<run>/llm/judge.json` and the ratings with their reasons to `<run>/llm/judge_ratings.parquet`
(`judge_results`); every answer is in the run's record (`records`), so a rerun sends nothing
already answered.
"""

from __future__ import annotations

import logging
import numpy as np
import pandas as pd

from vqlc_core.base.runio import RunError, write_json, write_parquet
from vqlc_core.llm.agreement import agreement, method_table, position_effect
from vqlc_core.llm.client import ChatClient, plan
from vqlc_core.llm.endpoint import Endpoint
from vqlc_core.llm.judge_items import ROLES, JudgeItem, judged_items
from vqlc_core.llm.judge_prompts import EXAMPLE_CONCEPTS, judge_request, parse_judgement
from vqlc_core.llm.judge_results import RATING_COLUMNS, judge_table
from vqlc_core.llm.localserver import WEAK_JUDGE_NOTE, Session, endpoints
from vqlc_core.llm.records import Records
from vqlc_core.llm.runfacts import concepts_digest, llm_dir
from vqlc_core.llm.settings import N_JUDGED, JudgeConfig

log = logging.getLogger(__name__)


# --- running judges ---------------------------------------------------------------------------

def ratings_frame(judge: str, items: list[JudgeItem], answers) -> pd.DataFrame:
    """One row per concept shown, with the judge's rating and reason (NaN and '' when the answer
    did not parse)."""
    rows = []
    for item, answer in zip(items, answers):
        parsed = parse_judgement(answer.content, item.letters)
        for s in item.shown:
            rating, reason = parsed[s.letter] if parsed else (np.nan, "")
            rows.append({"judge": judge, "text_id": item.text_id, "stratum": item.stratum, "label": item.label,
                         "prediction": item.prediction, "method": s.method, "role": s.role, "concept": s.concept,
                         "word": s.word, "letter": s.letter, "view": s.view, "rating": float(rating), "reason": reason,
                         "parsed": parsed is not None, "finish_reason": answer.finish_reason, "text": item.text})
    return pd.DataFrame(rows, columns=RATING_COLUMNS)


def run_judges(run, endpoints: list[Endpoint], n: int = N_JUDGED, seed: int = 0, methods: list[str] | None = None,
               max_tokens: int | None = None) -> dict:
    """Judge `n` dev sentences of `run` with every endpoint; write judge.json and
    judge_ratings.parquet under <run>/llm/ and return the results (see `results`). Each judge is
    started (the offline default) or checked to be listening only when it has requests to send."""
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise RunError(f"Two judges are named alike ({', '.join(names)}); give each --judge its own name=.")
    log.info("vqlc: judge: %d dev sentences of run '%s' (stratified by %s) ...", n, run.dir.name,
             "TP/FP/TN/FN" if len(run.class_names) == 2 else "class and correctness")
    items = judged_items(run, n, seed, methods)
    records = Records(llm_dir(run) / "records")
    requests = {e.name: [judge_request(it, run.class_names, max_tokens) for it in items] for e in endpoints}
    p = plan({e.name: ChatClient(e, records) for e in endpoints}, requests)
    log.info("vqlc: judge: %s", p.describe())
    frames, counts = [], {}
    for e in endpoints:
        with Session(e, records, llm_dir(run)) as session:
            answers = session.complete_many(requests[e.name], desc="judging")
        counts[e.name] = {"sent": session.client.sent, "from_record": session.client.from_record}
        frames.append(ratings_frame(e.name, items, answers))
    ratings = pd.concat(frames, ignore_index=True)
    out = results(run, endpoints, items, ratings, n, seed)
    if any(e.managed for e in endpoints):
        out["note"] = WEAK_JUDGE_NOTE
    write_parquet(llm_dir(run) / "judge_ratings.parquet", ratings)
    write_json(llm_dir(run) / "judge.json", out)
    return {**out, "requests": counts}


def identical_alike(ratings: pd.DataFrame) -> float | None:
    """The share of identical concepts shown for one sentence (the same view under several
    letters) that a judge rated alike, as it was told to; None when there were none."""
    ok = ratings[ratings["parsed"]]
    groups = ok.groupby(["text_id", "view"])["rating"].agg(["size", "nunique"])
    groups = groups[groups["size"] > 1]
    return float((groups["nunique"] == 1).mean()) if len(groups) else None


def copied_reasons(ratings: pd.DataFrame) -> float | None:
    """The share of a judge's parsed reasons that repeat one of the worked example's own reasons
    word for word (case aside): a judge that copies the example's form rather than reading the
    concepts. None when it gave no reason."""
    given = ratings.loc[ratings["parsed"], "reason"].fillna("").str.strip().str.casefold()
    given = given[given != ""]
    example = {reason.casefold() for _, _, reason in EXAMPLE_CONCEPTS}
    return float(given.isin(example).mean()) if len(given) else None


def results(run, endpoints: list[Endpoint], items: list[JudgeItem], ratings: pd.DataFrame, n: int, seed: int) -> dict:
    """Per judge: requests, parsed and unparseable answers, parse rate and the method table;
    across judges: `agreement.agreement`."""
    judges = {}
    for e in endpoints:
        r = ratings[ratings["judge"] == e.name]
        per_item = r.groupby("text_id")["parsed"].first()
        parsed = int(per_item.sum())
        table = method_table(r, seed)
        position = position_effect(r)
        alone = position.pop("from_letters") if position else {}  # beside each mean, what the letters alone give
        table["from_letters"] = [alone.get(key) for key in zip(table["role"], table["method"])]
        judges[e.name] = {"endpoint": e.describe(), "requests": len(per_item), "parsed": parsed,
                          "unparseable": int(len(per_item) - parsed),
                          "parse_rate": parsed / len(per_item) if len(per_item) else None,
                          "identical_rated_alike": identical_alike(r), "copied_reasons": copied_reasons(r),
                          "position": position,
                          "table": [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
                                    for row in table.to_dict("records")]}
    stratum_counts = pd.Series([it.stratum for it in items]).value_counts().sort_index()
    methods = sorted({s.method for it in items for s in it.shown})
    return {"run": run.dir.name, "n_sentences": len(items), "n_asked": n, "seed": seed,
            "methods": methods, "roles": list(ROLES), "concepts": {m: concepts_digest(run.dir, m) for m in methods},
            "strata": {str(k): int(v) for k, v in stratum_counts.items()}, "judges": judges,
            "agreement": agreement(ratings)}


def command(run, cfg: JudgeConfig) -> str:
    """`vqlc judge`: judge the run's concepts with the --judge endpoints (default: the offline
    SmolLM2), write the results under <run>/llm/ and return the markdown table."""
    if cfg.n < 1:
        raise RunError("--n must be at least 1 sentence.")
    if cfg.max_tokens is not None and cfg.max_tokens < 1:
        raise RunError("--max-tokens must be at least 1.")
    res = run_judges(run, endpoints(cfg.judge, run.cfg.cache_dir), cfg.n, cfg.seed, cfg.methods, cfg.max_tokens)
    sent = ", ".join(f"{j}: {c['sent']} sent, {c['from_record']} from the record" for j, c in res["requests"].items())
    log.info("vqlc: judge: %s; results in %s", sent, llm_dir(run) / "judge.json")
    out = judge_table(res)
    if res.get("note"):
        out += "\n" + res["note"] + "\n"
    return out
