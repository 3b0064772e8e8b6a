"""Case-study pins saved with their run: `<run>/ui/pins.json`, a JSON list of the records
`browse.make_pin` makes, written atomically (never pickled), so pins survive a restart and
everyone who opens the run sees them. A view of an input (the concepts ablated on the page
together) is pinned once per run and method; a pin made before pins kept that set loads as one
with none ablated.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from vqlc_core.views.browse import ablated_ids, find_pin
from vqlc_core.base.runio import RunError, read_json, write_json

# One dashboard process serves every session: a read-change-write of the file is done whole.
_LOCK = threading.Lock()


def pins_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "ui" / "pins.json"


def _restored(pin: dict) -> dict:
    """A pin as `make_pin` made it: JSON keeps object keys as strings, labels are keyed by id."""
    return {**pin, "labels": {int(k): v for k, v in pin.get("labels", {}).items()}}


def load_pins(run_dir: str | Path) -> list[dict]:
    """The run's pins, oldest first; none when nothing was pinned yet."""
    path = pins_path(run_dir)
    if not path.exists():
        return []
    try:
        pins = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunError(f"The case study's pins file {path} is not valid JSON ({err.__class__.__name__}); "
                       "delete it to start the case study afresh.") from err
    if not isinstance(pins, list) or not all(isinstance(p, dict) and {"method", "text"} <= set(p) for p in pins):
        raise RunError(f"The case study's pins file {path} does not hold a list of pins; delete it to start the "
                       "case study afresh.")
    return [_restored(p) for p in pins]


def save_pins(run_dir: str | Path, pins: list[dict]) -> None:
    """Write the run's pins (all of them, replacing the file atomically)."""
    write_json(pins_path(run_dir), list(pins))


def add_pin(run_dir: str | Path, pin: dict) -> int | None:
    """Add `pin` to the run's pins and return how many there are now; None, and nothing added,
    when the same input with the same concepts ablated is already pinned from this run and method."""
    with _LOCK:
        pins = load_pins(run_dir)
        if find_pin(pins, pin.get("run"), pin["method"], pin["text"], ablated_ids(pin)) is not None:
            return None
        save_pins(run_dir, [*pins, pin])
        return len(pins) + 1


def remove_pin(run_dir: str | Path, run: str | None, method: str, text: str, ablated=()) -> bool:
    """Remove the pin of `text` under `method` (from run `run`) with the concepts `ablated`;
    whether there was one."""
    with _LOCK:
        pins = load_pins(run_dir)
        i = find_pin(pins, run, method, text, ablated)
        if i is None:
            return False
        save_pins(run_dir, pins[:i] + pins[i + 1:])
        return True
