"""One client for any OpenAI-compatible chat endpoint (vLLM, llama.cpp's server, Ollama,
`transformers serve`, hosted providers), with a record of every answer kept in the run.

A request is keyed by the sha256 of the canonical JSON of what decides its answer (the
endpoint, the model, the messages and the sampling parameters) and its answer is written to
`<run>/llm/records/<key>.json` atomically as soon as it arrives: a rerun sends nothing already
answered and a killed run resumes where it stopped. Retries back off exponentially with jitter
on 429, 5xx and lost connections, never on another 4xx; every failure that is left ends in one
sentence. The API key is read from the environment variable the user names, at call time, and
never written anywhere.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import queue
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlparse

from .runio import RunError, read_json, write_json

log = logging.getLogger(__name__)

PLACEHOLDER_KEY = "not-needed"  # local servers take any key; the openai client wants one
SPEC_FIELDS = ("name", "url", "model", "key_env", "concurrency", "timeout", "retries")
CHARS_PER_TOKEN = 4  # a rough token count for the cost shown before a command starts


# --- tolerant parsing of answers -------------------------------------------------------------

def _object_at(text: str, start: int) -> dict | None:
    """The object that opens at text[start], read as tolerantly as small models need: JSON; else
    a Python literal with single quotes (`ast.literal_eval`, which evaluates nothing else); else,
    for an object cut short by the token limit, its text with the open string and objects closed,
    or its members up to the last complete one. None when nothing reads."""
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
        return obj if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        pass
    ends = [i for i in range(start + 1, len(text)) if text[i] == "}"]
    for end in ends:
        try:
            obj = ast.literal_eval(text[start : end + 1])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    cut = [text[start:].rstrip() + tail for tail in ('"}', '"}}')] + [text[start : e + 1] + "}" for e in reversed(ends)]
    for candidate in cut:
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj:
            return obj
    return None


def extract_json(text: str | None) -> dict | None:
    """The first object in `text` (a reply may wrap it in prose or a ``` fence), read by
    `_object_at`, or None. Callers check that it has every key they asked for: an object cut
    short keeps only what was written before the cut."""
    if not text:
        return None
    for m in re.finditer(r"\{", text):
        obj = _object_at(text, m.start())
        if obj is not None:
            return obj
    return None


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN)


# --- endpoints ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and how to talk to it.

    api_key_env: the NAME of the environment variable that holds the key (None: a local server
        that takes any key); the key itself is read when a request is sent.
    record_as: what identifies the endpoint in record keys instead of `base_url` and `model`; a
        server vqlc starts itself gets a new port (and an absolute model path) each time, so its
        answers are recorded under a stable name.
    extra_body: request fields a particular server needs beyond the OpenAI ones.
    managed: a model directory vqlc serves itself with `transformers serve` (see `localserver`);
        `base_url` is filled in once it runs."""

    name: str
    base_url: str
    model: str
    api_key_env: str | None = None
    timeout: float = 300.0
    retries: int = 3  # tries after the first, on 429, 5xx and lost connections
    backoff_s: float = 2.0  # the first retry's mean delay; doubled on each further one
    concurrency: int = 4
    record_as: str | None = None
    extra_body: dict = field(default_factory=dict)
    managed: str | None = None

    def __post_init__(self):
        if not self.name or not self.model:
            raise RunError("A judge needs a name and a model, e.g. --judge name=mine,url=http://127.0.0.1:8000/v1,"
                           "model=my-model.")
        if self.concurrency < 1 or self.retries < 0 or self.timeout <= 0:
            raise RunError(f"Judge '{self.name}': concurrency must be at least 1, retries at least 0 and timeout "
                           "positive.")

    @property
    def identity(self) -> dict:
        """What decides an answer besides the request: the server and the model."""
        if self.record_as:
            return {"endpoint": self.record_as}
        return {"base_url": self.base_url.rstrip("/"), "model": self.model}

    def api_key(self) -> str:
        if not self.api_key_env:
            return PLACEHOLDER_KEY
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RunError(f"Judge '{self.name}' reads its API key from ${self.api_key_env}, which is not set; "
                           f"export it with the provider's key (it is never written to disk).")
        return key

    def describe(self) -> dict:
        """What results record about the endpoint (never the key)."""
        if self.managed:
            return {"name": self.name, "server": "transformers serve on 127.0.0.1, started by vqlc",
                    "model": Path(self.model).name}
        return {"name": self.name, "base_url": self.base_url, "model": self.model}


def parse_endpoint(spec: str) -> Endpoint:
    """An Endpoint from `name=...,url=...,model=...[,key_env=...][,concurrency=N][,timeout=S]
    [,retries=N]` as given to --judge."""
    parts = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in SPEC_FIELDS:
            raise RunError(f"Cannot read '{item}' in --judge '{spec}': give name=...,url=...,model=... and optionally "
                           f"key_env=, concurrency=, timeout=, retries= (or 'local' for the offline default).")
        parts[key] = value.strip()
    missing = [k for k in ("url", "model") if not parts.get(k)]
    if missing:
        raise RunError(f"--judge '{spec}' lacks {' and '.join(missing)}: give name=...,url=...,model=..., e.g. "
                       "name=vllm,url=http://127.0.0.1:8000/v1,model=Qwen/Qwen2.5-7B-Instruct.")
    url = parts["url"]
    if urlparse(url).scheme not in ("http", "https") or not urlparse(url).hostname:
        raise RunError(f"--judge url '{url}' is not an http(s) address; give the server's OpenAI base URL, e.g. "
                       "http://127.0.0.1:8000/v1.")
    try:
        numbers = {k: (float if k == "timeout" else int)(parts[k]) for k in ("concurrency", "timeout", "retries")
                   if k in parts}
    except ValueError:
        raise RunError(f"--judge '{spec}': concurrency and retries must be whole numbers and timeout a number of "
                       "seconds.") from None
    return Endpoint(name=parts.get("name") or parts["model"], base_url=url, model=parts["model"],
                    api_key_env=parts.get("key_env") or None, **numbers)


def check_reachable(endpoint: Endpoint, timeout: float = 5.0) -> None:
    """Raise the one-sentence error at once when nothing listens at the endpoint's host and
    port, before any work is done for it. Skipped behind a proxy (the proxy resolves names)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                       "all_proxy")):
        return
    u = urlparse(endpoint.base_url)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        socket.create_connection((u.hostname, port), timeout=timeout).close()
    except OSError as err:
        raise _unreachable(endpoint, err) from err


def _reason(err: BaseException | None) -> str:
    """A few words for why a connection failed, from the innermost cause."""
    while err is not None and err.__cause__ is not None and err.__cause__ is not err:
        err = err.__cause__
    text = str(err).lower() if err is not None else ""
    if isinstance(err, ConnectionRefusedError) or "refused" in text:
        return "connection refused"
    if isinstance(err, (TimeoutError, socket.timeout)) or "timed out" in text or "timeout" in text:
        return "the connection timed out"
    if isinstance(err, socket.gaierror) or "name or service" in text or "resolve" in text:
        return "its host name does not resolve"
    return (str(err) or type(err).__name__)[:120] if err is not None else "the connection failed"


def _unreachable(endpoint: Endpoint, err: BaseException | None) -> RunError:
    return RunError(f"Cannot reach the judge endpoint {endpoint.base_url}: {_reason(err)}; start the server or check "
                    "--judge.")


# --- requests and their record ----------------------------------------------------------------

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


@dataclass
class Plan:
    """What a command will send: per judge, its requests and those not answered before."""

    requests: dict[str, list[Request]]
    pending: dict[str, int]
    prompt_tokens: int  # of the pending requests, estimated
    answer_tokens: int  # at most, of the pending requests

    def describe(self) -> str:
        total = sum(len(r) for r in self.requests.values())
        todo = sum(self.pending.values())
        per = ", ".join(f"{j}: {len(r)} requests, {self.pending[j]} to send" for j, r in self.requests.items())
        return (f"{total} requests ({per}); {total - todo} answered before, {todo} to send: about "
                f"{self.prompt_tokens:,} prompt tokens and at most {self.answer_tokens:,} answer tokens "
                f"(estimated at {CHARS_PER_TOKEN} characters a token).")


def plan(clients: dict[str, "ChatClient"], requests: dict[str, list[Request]]) -> Plan:
    """What sending `requests` (per client name) costs: pending requests and estimated tokens."""
    pending = {j: clients[j].pending(r) for j, r in requests.items()}
    prompt = sum(estimate_tokens(m["content"]) for rs in pending.values() for r in rs for m in r.messages)
    answer = sum(int(r.params.get("max_tokens") or 0) for rs in pending.values() for r in rs)
    return Plan(requests, {j: len(p) for j, p in pending.items()}, prompt, answer)


# --- the client ----------------------------------------------------------------------------------

class ChatClient:
    """Sends requests to one endpoint, at most `endpoint.concurrency` at a time, and answers
    from the record what was answered before. `sent` and `from_record` count this client's
    requests."""

    def __init__(self, endpoint: Endpoint, records: Records, sleep: Callable[[float], None] | None = None):
        self.endpoint, self.records = endpoint, records
        self.sent = self.from_record = self.tries = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait  # an interruptible sleep
        self._client = None

    def use(self, endpoint: Endpoint) -> None:
        """Send to `endpoint` from now on (the same endpoint, started or checked: its record
        identity must not change)."""
        if endpoint.identity != self.endpoint.identity:
            raise ValueError("a client's endpoint may only be replaced by the same endpoint, started")
        self.endpoint, self._client = endpoint, None

    def pending(self, requests: Iterable[Request]) -> list[Request]:
        """The requests that have no recorded answer yet."""
        return [r for r in requests if self.records.get(request_key(self.endpoint, r)) is None]

    def _openai(self):
        if self._client is None:
            from openai import OpenAI

            # retries are ours (backoff with jitter, counted); the key is read now, not stored
            self._client = OpenAI(base_url=self.endpoint.base_url, api_key=self.endpoint.api_key(),
                                  timeout=self.endpoint.timeout, max_retries=0)
        return self._client

    def _send(self, request: Request) -> dict:
        """One request with retries; the answer as {"content", "finish_reason", "usage"}."""
        import openai

        ep = self.endpoint
        for attempt in range(ep.retries + 1):
            with self._lock:
                self.tries += 1
            try:
                r = self._openai().chat.completions.create(model=ep.model, messages=list(request.messages),
                                                           extra_body=ep.extra_body or None, **request.params)
                choice = r.choices[0]
                usage = r.usage.model_dump() if getattr(r, "usage", None) is not None else None
                return {"content": choice.message.content, "finish_reason": choice.finish_reason, "usage": usage}
            except openai.APIConnectionError as err:  # refused, reset or timed out: worth another try
                failure, delay = _unreachable(ep, err), None
            except openai.APIStatusError as err:
                status = err.status_code
                if status != 429 and status < 500:
                    raise _refused(ep, err) from err
                failure = RunError(f"The judge endpoint {ep.base_url} answered HTTP {status} "
                                   f"({_status_text(err)}) {ep.retries + 1} times; check the server's log or try again "
                                   "later.")
                delay = _retry_after(err)
            if attempt == ep.retries or self._stop.is_set():
                raise failure
            wait = delay if delay is not None else ep.backoff_s * 2 ** attempt * random.uniform(0.5, 1.5)
            log.debug("%s: try %d failed (%s); again in %.1f s", ep.name, attempt + 1, failure, wait)
            self._sleep(wait)
        raise AssertionError("unreachable")

    def complete(self, request: Request) -> Answer:
        """The answer to one request: from the record, else sent and then recorded."""
        key = request_key(self.endpoint, request)
        hit = self.records.get(key)
        if hit is not None:
            with self._lock:
                self.from_record += 1
            return Answer(hit["answer"].get("content"), hit["answer"].get("finish_reason"), True)
        t0 = time.perf_counter()
        answer = self._send(request)
        self.records.put(key, self.endpoint, request, answer, time.perf_counter() - t0)
        with self._lock:
            self.sent += 1
        return Answer(answer["content"], answer["finish_reason"], False)

    def complete_many(self, requests: list[Request], desc: str = "requests") -> list[Answer]:
        """Answers in the order of `requests`, with a progress bar. The first failure stops the
        others (no new request starts) and is raised; so is Ctrl-C, which leaves every answer
        received so far in the record. Workers are daemon threads, so an interrupted command
        exits without waiting for a slow answer."""
        from tqdm.auto import tqdm

        todo: queue.Queue = queue.Queue()
        done: queue.Queue = queue.Queue()
        for i, r in enumerate(requests):
            todo.put((i, r))
        self._stop.clear()

        def work():
            while not self._stop.is_set():
                try:
                    i, r = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((i, self.complete(r), None))
                except BaseException as err:  # handed to the caller's thread
                    done.put((i, None, err))

        workers = [threading.Thread(target=work, daemon=True) for _ in range(min(self.endpoint.concurrency,
                                                                                  max(len(requests), 1)))]
        for w in workers:
            w.start()
        out: list[Answer | None] = [None] * len(requests)
        finished = False
        try:
            with tqdm(total=len(requests), desc=f"{self.endpoint.name}: {desc}", unit="req", leave=False) as bar:
                for _ in range(len(requests)):
                    i, answer, err = done.get()
                    if err is not None:
                        raise err
                    out[i] = answer
                    bar.update(1)
            finished = True
        finally:
            if not finished:
                self._stop.set()  # no new request starts; a retry waiting to be sent gives up
        return out  # type: ignore[return-value]


def _status_text(err) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(err.status_code).phrase
    except ValueError:
        return "error"


def _retry_after(err) -> float | None:
    """The delay a 429 or 503 asks for (Retry-After, in seconds, at most a minute), if any."""
    try:
        value = float(err.response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
    return min(max(value, 0.0), 60.0)


def _refused(endpoint: Endpoint, err) -> RunError:
    """The one sentence for a 4xx other than 429: the request itself is wrong, so no retry."""
    status = err.status_code
    body = getattr(err, "body", None)
    detail = ""
    if isinstance(body, dict):
        inner = body.get("error")
        detail = str(body.get("detail") or body.get("message") or
                     (inner.get("message") if isinstance(inner, dict) else inner) or "")
    what = re.sub(r"\s+", " ", detail)[:160].rstrip(". ") or _status_text(err)
    if status in (401, 403):
        hint = (f"check the key in ${endpoint.api_key_env}" if endpoint.api_key_env
                else "give key_env=VARIABLE in --judge for a provider that needs a key")
    elif status == 404:
        hint = "check the url (it usually ends in /v1) and the model name in --judge"
    else:
        hint = "check the model name and options in --judge"
    return RunError(f"The judge endpoint {endpoint.base_url} refused the request with HTTP {status} ({what}); "
                    f"{hint}.")


def started(endpoint: Endpoint, base_url: str) -> Endpoint:
    """The managed `endpoint` once its server listens at `base_url`."""
    return replace(endpoint, base_url=base_url)
