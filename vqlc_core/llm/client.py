"""One client for any OpenAI-compatible chat endpoint, answering from the run's record what was
answered before (`records`): what a command will send and cost (`plan`), requests sent at most
`concurrency` at a time, and the answers read tolerantly (`extract_json`).

Retries back off exponentially with jitter on 429, 5xx and lost connections, never on another
4xx; every failure that is left ends in one sentence.
"""

from __future__ import annotations

import ast
import json
import logging
import queue
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from vqlc_core.base.runio import RunError
from vqlc_core.llm.endpoint import Endpoint, unreachable
from vqlc_core.llm.records import Answer, Records, Request, request_key

log = logging.getLogger(__name__)

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
            raise RunError("a client's endpoint may only be replaced by the same endpoint, started")
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
                failure, delay = unreachable(ep, err), None
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

    def probe(self) -> None:
        """One short chat request before the work, to name at once an endpoint that cannot chat:
        a model with no chat template (a base model served by `transformers serve` answers every
        chat request with HTTP 500 and says why only in its log, while it still completes plain
        text; other servers say "chat template" in their error). Any other failure is left to the
        work's own retries and their sentence."""
        import openai

        ep = self.endpoint
        try:
            self._chat_ok()
        except openai.APIStatusError as err:
            self._client = None  # a server may drop the connection after a 500: ask again on a new one
            if "chat template" in _detail(err).replace("_", " ").lower() or (
                    err.status_code >= 500 and self._completes_text() and not self._chat_ok(quiet=True)):
                raise RunError(f"The model {ep.model} at {ep.base_url} has no chat template, so it cannot answer "
                               "chat requests: serve a chat (instruct) model, or give this model's tokenizer a chat "
                               "template.") from err
        except openai.APIConnectionError:
            pass  # refused or timed out: the work's retries say so

    def _chat_ok(self, quiet: bool = False) -> bool:
        """One chat request of one token; with `quiet`, False instead of its error."""
        try:
            self._openai().chat.completions.create(model=self.endpoint.model, max_tokens=1,
                                                   messages=[{"role": "user", "content": "Say OK."}],
                                                   extra_body=self.endpoint.extra_body or None)
        except Exception:
            if quiet:
                return False
            raise
        return True

    def _completes_text(self) -> bool:
        """Whether the endpoint completes plain text (the /completions route): a model that
        does, but fails every chat request, cannot chat."""
        try:
            self._openai().completions.create(model=self.endpoint.model, prompt="OK", max_tokens=1)
        except Exception:  # any failure means no: the chat failure is then left to the work's retries
            return False
        return True

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


def _detail(err) -> str:
    """What an error answer's body says, where it says anything."""
    body = getattr(err, "body", None)
    if not isinstance(body, dict):
        return ""
    inner = body.get("error")
    return str(body.get("detail") or body.get("message") or (inner.get("message") if isinstance(inner, dict) else inner)
               or "")


def _refused(endpoint: Endpoint, err) -> RunError:
    """The one sentence for a 4xx other than 429: the request itself is wrong, so no retry."""
    status = err.status_code
    what = re.sub(r"\s+", " ", _detail(err))[:160].rstrip(". ") or _status_text(err)
    if status in (401, 403):
        hint = (f"check the key in ${endpoint.api_key_env}" if endpoint.api_key_env
                else "give key_env=VARIABLE in --judge for a provider that needs a key")
    elif status == 404:
        hint = "check the url (it usually ends in /v1) and the model name in --judge"
    else:
        hint = "check the model name and options in --judge"
    return RunError(f"The judge endpoint {endpoint.base_url} refused the request with HTTP {status} ({what}); "
                    f"{hint}.")


# --- what a command will send --------------------------------------------------------------------

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


def plan(clients: dict[str, ChatClient], requests: dict[str, list[Request]]) -> Plan:
    """What sending `requests` (per client name) costs: pending requests and estimated tokens."""
    pending = {j: clients[j].pending(r) for j, r in requests.items()}
    prompt = sum(estimate_tokens(m["content"]) for rs in pending.values() for r in rs for m in r.messages)
    answer = sum(int(r.params.get("max_tokens") or 0) for rs in pending.values() for r in rs)
    return Plan(requests, {j: len(p) for j, p in pending.items()}, prompt, answer)
