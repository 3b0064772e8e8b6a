"""An OpenAI-compatible chat endpoint (vLLM, llama.cpp's server, Ollama, `transformers serve`,
hosted providers) and how to reach it: read from a --judge spec, checked to be listening before
any work is done for it, and every failure to reach it said in one sentence. The API key is read
from the environment variable the user names, at call time, and never written anywhere.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from vqlc_core.base.runio import RunError

PLACEHOLDER_KEY = "not-needed"  # local servers take any key; the openai client wants one
SPEC_FIELDS = ("name", "url", "model", "key_env", "concurrency", "timeout", "retries")
SPEC_HELP = ("an OpenAI-compatible chat endpoint as name=NAME,url=BASE_URL,model=MODEL[,key_env=VAR][,concurrency=N]"
             "[,timeout=S][,retries=N], e.g. name=vllm,url=http://127.0.0.1:8000/v1,model=Qwen/Qwen2.5-7B-Instruct; "
             "key_env names the environment variable holding the API key (the key is never written anywhere); "
             "'local' (the default) starts `transformers serve` with the offline SmolLM2-135M-Instruct, a weak "
             "judge that shows the path runs offline")  # how --judge is written


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
        raise unreachable(endpoint, err) from err


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


def unreachable(endpoint: Endpoint, err: BaseException | None) -> RunError:
    return RunError(f"Cannot reach the judge endpoint {endpoint.base_url}: {_reason(err)}; start the server or check "
                    "--judge.")


def started(endpoint: Endpoint, base_url: str) -> Endpoint:
    """The managed `endpoint` once its server listens at `base_url`."""
    return replace(endpoint, base_url=base_url)
