"""A view's state as a link's query parameters, and back: run, method, concept, input text and
ablated concepts, so that a link opens the same view in another browser. What a link asks for is
checked here, and a run, method or concept that is not there is refused in one sentence;
`vqlc_ui.share` moves these plain dicts in and out of the page's URL.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from vqlc_core.base.runio import RunError

KEYS = ("run", "method", "concept", "text", "ablate")  # a link's parameters, in the order it writes them
_WHOLE_NUMBER = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() also takes '²', which int() refuses


def _whole_number(value) -> int | None:
    text = str(value).strip()
    return int(text) if _WHOLE_NUMBER.fullmatch(text) else None


def parse_ablate(value: str) -> dict[str, list[int]]:
    """'vqlc:3,vqlc:5,kmeans:2' -> {'vqlc': [3, 5], 'kmeans': [2]}; an item that is not
    method:number is left out."""
    out: dict[str, list[int]] = {}
    for item in str(value).split(","):
        method, _, k = item.strip().partition(":")
        if method and (k := _whole_number(k)) is not None:
            out.setdefault(method, []).append(k)
    return out


def format_ablate(chosen: dict[str, list[int]]) -> str:
    """The inverse of `parse_ablate`: methods in the order given, each one's ids sorted."""
    return ",".join(f"{m}:{int(k)}" for m, ids in chosen.items() for k in sorted(ids))


def encode(state: dict) -> dict[str, str]:
    """The query parameters of a view's state, in KEYS order; None and no ablated concept are left
    out (an empty input text is kept: the link then opens an empty box)."""
    out = {}
    for key in KEYS:
        value = state.get(key)
        if key == "ablate":
            value = format_ablate(value or {}) or None
        if value is not None:
            out[key] = str(value)
    return out


def link(base: str | None, params: dict[str, str]) -> str:
    """The link to a view: the page's address with its query string."""
    return (base or "") + ("?" + urlencode(params) if params else "")


def decode(params: dict[str, str], runs) -> tuple[dict, str | None]:
    """The view a link's query parameters ask for, and one sentence on what it got wrong (None
    when nothing). Run, method and text are kept as written, the concept too (only the loaded run
    can check it: `check_concept`), the ablated concepts parsed; other parameters are left out.
    A run that is not in `runs` is refused, with the link's concept and ablations (they were that
    run's); its method and input text are kept."""
    view = {key: str(params[key]) for key in KEYS if key in params}
    run = view.get("run")
    if run is not None and run not in runs:
        kept = {key: view[key] for key in ("method", "text") if key in view}
        return kept, f"The link names run '{run}', which is not built here; choose a run in the sidebar."
    if "ablate" in view:
        view["ablate"] = parse_ablate(view["ablate"])
    return view, None


def check_method(asked: str, shown: str, run: str) -> None:
    """Refuse, in one sentence, a link's method that run `run` has not finished (`shown` is the
    one the page shows instead)."""
    if asked != shown:
        raise RunError(f"Run '{run}' has no finished method '{asked}'; showing '{shown}' instead.")


def check_concept(value: str, n_concepts: int, method: str, run: str) -> int:
    """A link's concept as an id of a method with `n_concepts` concepts; anything else (not a
    whole number, out of range) refused in one sentence."""
    k = _whole_number(value)
    if k is None or k >= n_concepts:
        raise RunError(f"Concept '{value}' does not exist: method '{method}' of run '{run}' has concepts "
                       f"0 to {n_concepts - 1}.")
    return k
