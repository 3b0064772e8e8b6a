"""`vqlc label`: automatic concept labels written by an LLM and scored by detection, as TRACE and
EleutherAI's delphi do it. A concept's member contexts (`contexts`) go to the model, three
labels are drawn and a name kept when two agree (`label_prompts`), a kept name is scored on
held-out contexts (`detection`), and the labels are stored with the run (`labels`); a label
edited by hand is left as it is.
"""

from __future__ import annotations

import logging

from vqlc_core.base.runio import RunError
from vqlc_core.llm.client import CHARS_PER_TOKEN, ChatClient, estimate_tokens, plan
from vqlc_core.llm.contexts import CONTEXT_CHARS, contexts, sample_rows
from vqlc_core.llm.detection import DETECT_SYSTEM, detection_requests, detection_scores, parse_yes_no
from vqlc_core.llm.endpoint import Endpoint
from vqlc_core.llm.label_prompts import LABEL_TOKENS, N_SAMPLES, agree, label_request, parse_label
from vqlc_core.llm.labels import labels_path, labels_table, load_labels, save_labels
from vqlc_core.llm.localserver import WEAK_LABELLER_NOTE, Session, endpoints
from vqlc_core.llm.records import Records
from vqlc_core.llm.runfacts import check_methods, llm_dir
from vqlc_core.llm.settings import N_CONTEXTS, N_HELD_OUT, LabelConfig
from vqlc_core.methods.concepts import is_prediction_concept

log = logging.getLogger(__name__)


# --- labelling a method --------------------------------------------------------------------------

def choose_concepts(concepts, ids: list[int] | None = None, max_concepts: int | None = None) -> list[int]:
    """The concepts to label: `ids` (checked), else the `max_concepts` largest, else every
    concept with train members; in id order."""
    sizes = concepts.sizes
    K = len(sizes)
    if ids:
        bad = [k for k in ids if not 0 <= k < K]
        if bad:
            raise RunError(f"Concept ids {bad} are outside {concepts.method}'s concepts 0..{K - 1}.")
        empty = [k for k in ids if sizes[k] == 0]
        if empty:
            raise RunError(f"Concepts {empty} of {concepts.method} have no train members to label; choose others.")
        return sorted(set(int(k) for k in ids))
    have = concepts.used_ids()
    if max_concepts is not None:
        if max_concepts < 1:
            raise RunError("--max-concepts must be at least 1.")
        have = sorted(sorted(have, key=lambda k: (-sizes[k], k))[:max_concepts])
    return have


def label_method(run, method: str, endpoint: Endpoint, ids: list[int] | None = None,
                 max_concepts: int | None = None, n_contexts: int = N_CONTEXTS, n_held_out: int = N_HELD_OUT,
                 seed: int = 0, max_tokens: int = LABEL_TOKENS) -> dict:
    """Label `method`'s concepts of `run` with `endpoint` (an edited label is left as it is), score
    each kept label by detection, store them in labels_<method>.json and return a summary."""
    (method,) = check_methods(run, [method])
    concepts = run.concept_set(method)
    chosen = choose_concepts(concepts, ids, max_concepts)
    edited = {k for k, e in load_labels(run.dir, method).items() if e.get("edited")}
    todo = [k for k in chosen if k not in edited]
    tokens, texts = run.store.tokens, run.texts
    samples, shown = {}, {}
    for k in todo:
        kind = "pred" if is_prediction_concept(concepts.summary.loc[k]) else "word"
        samples[k] = sample_rows(concepts.assignments, tokens, k, kind, n_contexts, n_held_out, seed)
        shown[k] = contexts(texts, tokens, samples[k].shown)
    asks = [label_request(shown[k], samples[k].kind, i, max_tokens) for k in todo for i in range(N_SAMPLES)]
    records = Records(llm_dir(run) / "records")
    p = plan({endpoint.name: ChatClient(endpoint, records)}, {endpoint.name: asks})
    n_detect = sum(2 * len(samples[k].members) for k in todo)
    per = estimate_tokens(DETECT_SYSTEM) + (2 * CONTEXT_CHARS + 160) // CHARS_PER_TOKEN
    log.info("vqlc: label: %s, %d concepts (%d edited by hand, kept as they are): %s Then at most %d detection "
             "requests of about %d tokens each score the labels.", method, len(chosen), len(chosen) - len(todo),
             p.describe(), n_detect, per)
    entries: dict[int, dict] = {}
    with Session(endpoint, records, llm_dir(run)) as session:
        answers = session.complete_many(asks, desc="labelling")
        for i, k in enumerate(todo):
            drawn = [parse_label(a.content) for a in answers[i * N_SAMPLES : (i + 1) * N_SAMPLES]]
            entries[k] = {"concept": k, "kind": samples[k].kind, **agree(drawn), "samples": drawn,
                          "unparseable": sum(d is None for d in drawn), "n_shown": len(shown[k]),
                          "detection": None, "edited": False}
        detect, where = detection_requests(entries, samples, texts, tokens)
        said = [parse_yes_no(a.content) for a in session.complete_many(detect, desc="scoring labels")]
    for k, score in detection_scores(where, said).items():
        entries[k]["detection"] = score
    save_labels(run.dir, method, entries, {"method": method, "labeller": endpoint.describe(), "seed": seed,
                                           "n_contexts": n_contexts, "n_held_out": n_held_out, "n_samples": N_SAMPLES,
                                           "note": WEAK_LABELLER_NOTE if endpoint.managed else None})
    return {"method": method, "concepts": chosen, "edited_kept": sorted(edited & set(chosen)), "entries": entries,
            "sent": session.client.sent, "from_record": session.client.from_record}


def command(run, cfg: LabelConfig) -> str:
    """`vqlc label`: label a method's concepts with one --judge endpoint (default: the offline
    SmolLM2), store them in <run>/llm/labels_<method>.json and return them as markdown."""
    eps = endpoints(cfg.judge, run.cfg.cache_dir)
    if len(eps) != 1:
        raise RunError("`vqlc label` takes one --judge: the model that writes and scores the labels.")
    if cfg.n_contexts < 1 or cfg.n_held_out < 0 or cfg.max_tokens < 1:
        raise RunError("--contexts and --max-tokens must be at least 1 and --held-out at least 0.")
    built = run.methods_built()
    res = label_method(run, cfg.method or (built[0] if built else ""), eps[0], cfg.concepts, cfg.max_concepts,
                       cfg.n_contexts, cfg.n_held_out, cfg.seed, cfg.max_tokens)
    log.info("vqlc: label: %d sent, %d from the record; labels in %s", res["sent"], res["from_record"],
             labels_path(run.dir, res["method"]))
    shown = {k: e for k, e in load_labels(run.dir, res["method"]).items() if k in set(res["concepts"])}
    return labels_table(shown) + ("\n" + WEAK_LABELLER_NOTE + "\n" if eps[0].managed else "")
