"""Concept labels as the run keeps them: per method in `<run>/llm/labels_<method>.json`, with the
digest of the concept assignments they name (`concepts_digest`): a rebuilt method's concepts are
other concepts, so labels of an earlier build are not shown, and the next save moves them aside.
A label the user edited (see `set_label`) is marked as edited and never overwritten by a rerun
of `vqlc label` (`labelling`); `label_of` gives a concept's label, or None, and a `LabelBook`
gives a method's labels to its `ConceptSet.label`, so the name appears wherever the concept does
(cards, map, explanations, exports).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd

from vqlc_core.base.markdown import markdown_table
from vqlc_core.base.runio import RunError, read_json, write_json
from vqlc_core.llm.label_prompts import N_SAMPLES, STATUSES
from vqlc_core.llm.runfacts import concepts_digest

MAX_NAME_CHARS = 80  # a name the user writes
DIGEST = "assignments_sha256"  # the labels file's key for the concepts it names
TABLE_HEADER = ["concept", "status", "name", "agreement", "detection (balanced acc. [95% CI])", "description"]
_LOCK = threading.Lock()  # one process (the dashboard) edits a labels file whole


def labels_path(run_dir: str | Path, method: str) -> Path:
    return Path(run_dir) / "llm" / f"labels_{method}.json"


def _read(path: Path) -> dict:
    try:
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("concepts", {}), dict):
            raise RunError("not an object of concepts")
        return data
    except (ValueError, AttributeError, UnicodeDecodeError) as err:
        raise RunError(f"The labels file {path} is not valid ({err.__class__.__name__}); delete it and run "
                       f"`vqlc label` again.") from err


def is_stale(data: dict, digest: str | None) -> bool:
    """Whether a labels file's contents name another build of the concepts than `digest`."""
    return digest is not None and data.get(DIGEST) not in (None, digest)


def read_labels(run_dir: str | Path, method: str) -> tuple[str, dict[int, dict], dict]:
    """The method's labels file in one read: its state ('none': no file; 'stale': its labels
    name an earlier build of the concepts; 'current'), its entries by concept id (empty unless
    current) and its own facts (labeller, seed, note)."""
    path = labels_path(run_dir, method)
    if not path.exists():
        return "none", {}, {}
    data = _read(path)
    meta = {k: v for k, v in data.items() if k != "concepts"}
    if is_stale(data, concepts_digest(run_dir, method)):
        return "stale", {}, meta
    try:
        return "current", {int(k): v for k, v in data.get("concepts", {}).items()}, meta
    except (ValueError, TypeError) as err:
        raise RunError(f"The labels file {path} is not valid ({err.__class__.__name__}); delete it and run "
                       f"`vqlc label` again.") from err


def labels_state(run_dir: str | Path, method: str) -> str:
    """'none', 'stale' or 'current' (see `read_labels`)."""
    return read_labels(run_dir, method)[0]


def load_labels(run_dir: str | Path, method: str) -> dict[int, dict]:
    """concept id -> its label entry; empty when the method has no labels yet, or only labels of
    an earlier build of its concepts."""
    return read_labels(run_dir, method)[1]


def save_labels(run_dir: str | Path, method: str, entries: dict[int, dict], meta: dict | None = None) -> None:
    """Merge `entries` into the method's labels file; an edited label already there is kept. A
    file that labels an earlier build of the concepts is first moved aside
    (labels_<method>.<its digest>.json), never merged into."""
    with _LOCK:
        path = labels_path(run_dir, method)
        digest = concepts_digest(run_dir, method)
        data = _read(path) if path.exists() else None
        if data is not None and is_stale(data, digest):
            path.replace(path.with_name(f"{path.stem}.{str(data[DIGEST])[:12]}.json"))
            data = None
        data = data or {"method": method, "concepts": {}}
        data[DIGEST] = digest
        for k, entry in entries.items():
            old = data["concepts"].get(str(k))
            if old and old.get("edited") and not entry.get("edited"):
                continue
            data["concepts"][str(k)] = entry
        data.update(meta or {})
        write_json(path, data)


def set_label(run_dir: str | Path, method: str, k: int, name: str, description: str = "",
              status: str = "clear") -> dict:
    """Store a label the user wrote for concept k; it is marked as edited, a rerun of `label`
    keeps it, and its detection score (of the name it replaces) is dropped."""
    name = " ".join(str(name).split())
    if not name:
        raise RunError("A label needs a name; write at least one word.")
    if len(name) > MAX_NAME_CHARS:
        raise RunError(f"A label's name is at most {MAX_NAME_CHARS} characters; this one has {len(name)}.")
    if status not in STATUSES:
        raise RunError(f"A label's status is one of {', '.join(STATUSES)}, not '{status}'.")
    entry = {**load_labels(run_dir, method).get(int(k), {"concept": int(k)}), "name": name,
             "description": " ".join(str(description).split()), "status": status, "edited": True, "detection": None}
    save_labels(run_dir, method, {int(k): entry})
    return entry


def label_of(run_dir: str | Path, method: str, k: int) -> str | None:
    """Concept k's label (edited or agreed on), or None when it has none."""
    try:
        return load_labels(run_dir, method).get(int(k), {}).get("name")
    except RunError:
        return None


def shown_name(entry: dict | None) -> str | None:
    """How a label is shown beside its concept: its name, '(edited)' after one the user wrote;
    None when the entry has no name."""
    if not entry or not entry.get("name"):
        return None
    return f"{entry['name']} (edited)" if entry.get("edited") else str(entry["name"])


def _interval(det: dict) -> str:
    return "" if det.get("low") is None else f" [{det['low']:.2f}, {det['high']:.2f}]"


def label_facts(entry: dict | None) -> str | None:
    """One plain line on where a named label comes from and how well it scored, with its
    description; None when the entry has no name."""
    if not entry or not entry.get("name"):
        return None
    if entry.get("edited"):
        head = "Label written by hand"
    else:
        det = entry.get("detection") or {}
        score = ("not scored" if det.get("balanced_accuracy") is None else
                 f"detection {det['balanced_accuracy']:.2f}{_interval(det)} balanced accuracy on "
                 f"{det.get('members', 0)} + {det.get('non_members', 0)} held-out contexts")
        head = (f"LLM label: {entry.get('status') or 'no status'}, {entry.get('agreement', 0)}/{N_SAMPLES} samples "
                f"agree, {score}")
    description = (entry.get("description") or "").strip()
    return f"{head}. {description}" if description else f"{head}."


class LabelBook:
    """A method's labels as a ConceptSet shows them: read again whenever the labels file changes
    (an edit in another session, a `vqlc label` run), so every view shows the current ones. An
    unreadable file shows no labels (the Labels page says why)."""

    def __init__(self, run_dir: str | Path, method: str):
        self.run_dir, self.method = Path(run_dir), method
        self.path = labels_path(run_dir, method)
        self._stamp, self._entries = None, {}

    def entries(self) -> dict[int, dict]:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            try:
                entries = load_labels(self.run_dir, self.method) if stamp else {}
            except RunError:
                entries = {}
            self._entries, self._stamp = entries, stamp
        return self._entries

    def get(self, k: int) -> dict | None:
        return self.entries().get(int(k))

    def name(self, k: int) -> str | None:
        return shown_name(self.get(k))


# --- labels as tables -----------------------------------------------------------------------------

def labels_frame(entries: dict[int, dict]) -> pd.DataFrame:
    """Labels as a table: concept, status, name, edited, agreement (samples giving the name),
    detection (balanced accuracy, None when not scored) and description."""
    rows = []
    for k, e in sorted(entries.items()):
        det = e.get("detection") or {}
        rows.append({"concept": int(k), "status": e.get("status"), "name": e.get("name"),
                     "edited": bool(e.get("edited")),
                     "agreement": None if e.get("edited") else f"{e.get('agreement', 0)}/{N_SAMPLES}",
                     "detection": det.get("balanced_accuracy"), "detection_low": det.get("low"),
                     "detection_high": det.get("high"), "description": e.get("description")})
    return pd.DataFrame(rows, columns=["concept", "status", "name", "edited", "agreement", "detection", "detection_low",
                                       "detection_high", "description"])


def _given(value):
    """A table cell's value, None where it is missing (the frame holds a missing name as NaN)."""
    return None if pd.isna(value) else value


def labels_table(entries: dict[int, dict]) -> str:
    """Labels as markdown: concept, status, name, agreement, detection score."""
    rows = []
    for r in labels_frame(entries).itertuples():
        score = "–" if _given(r.detection) is None else f"{r.detection:.2f}"
        if score != "–" and _given(r.detection_low) is not None:
            score += f" [{r.detection_low:.2f}, {r.detection_high:.2f}]"
        name = (_given(r.name) or "–") + (" (edited)" if r.edited else "")
        rows.append([r.concept, _given(r.status) or "–", name, _given(r.agreement) or "–", score,
                     _given(r.description) or ""])
    return markdown_table(TABLE_HEADER, rows, numeric={0, 3, 4}) + "\n"
