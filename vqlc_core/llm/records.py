"""Chat requests and the run's record of their answers.

A request is keyed by the sha256 of the canonical JSON of what decides its answer (the
endpoint, the model, the messages and the sampling parameters) and its answer is written to
`<run>/llm/records/<key>.json` atomically as soon as it arrives: a rerun sends nothing already
answered and a killed run resumes where it stopped. The API key is never part of a record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from vqlc_core.base.runio import read_json, write_json
from vqlc_core.llm.endpoint import Endpoint


@dataclass(frozen=True)
class Request:
    """One chat completion: messages and sampling parameters (max_tokens, temperature, seed)."""

    messages: tuple  # of {"role", "content"} dicts
    params: dict

    def prompt_chars(self) -> int:
        return sum(len(m["content"]) for m in self.messages)


def chat(system: str, user: str, examples: tuple[tuple[str, str], ...] = (), **params) -> Request:
    """A request of a system message, worked examples (user question, assistant answer) and
    the question; examples show small models the answer's exact form better than a template."""
    shots = [{"role": role, "content": c} for q, a in examples for role, c in (("user", q), ("assistant", a))]
    return Request(({"role": "system", "content": system}, *shots, {"role": "user", "content": user}), dict(params))


def request_key(endpoint: Endpoint, request: Request) -> str:
    """sha256 of the canonical JSON of everything that decides the answer."""
    body = {**endpoint.identity, "messages": list(request.messages), "params": request.params,
            "extra_body": endpoint.extra_body}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class Answer:
    content: str | None
    finish_reason: str | None
    from_record: bool


class Records:
    """The answers received so far: one JSON file per request under `folder`, named by its key."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self.path(key)
        if not p.exists():
            return None
        try:
            return read_json(p)
        except (json.JSONDecodeError, UnicodeDecodeError):  # never written so (atomic); send it again
            return None

    def put(self, key: str, endpoint: Endpoint, request: Request, answer: dict, seconds: float) -> None:
        write_json(self.path(key), {"key": key, "endpoint": endpoint.identity, "judge": endpoint.name,
                                    "messages": list(request.messages), "params": request.params,
                                    "answer": answer, "seconds": round(seconds, 3)})

    def count(self) -> int:
        return sum(1 for _ in self.folder.glob("[0-9a-f]*.json")) if self.folder.exists() else 0
