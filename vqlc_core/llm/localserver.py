"""The offline default judge: `transformers serve` (the pinned transformers, extra `serving`)
started by vqlc on a free 127.0.0.1 port with the local SmolLM2-135M-Instruct model of the
decoder preset, and stopped when the command is done, also on an error or Ctrl-C.

A 135M model is a weak judge and labeller: it copies the worked example it is shown, breaks the
JSON now and then, and rates with little regard to the concept (docs/guides/llm.md, "A 135M model
is a weak judge"). The point of this default is that the whole path (prompts, record, parsing,
aggregation, agreement) runs with no network and no key; real judgements come from a capable
model behind any OpenAI-compatible endpoint (`--judge`).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from vqlc_core.base.runio import RunError
from vqlc_core.data.models import resolve_model
from vqlc_core.llm.client import ChatClient
from vqlc_core.llm.endpoint import Endpoint, check_reachable, parse_endpoint, started
from vqlc_core.llm.records import Answer, Records, Request

log = logging.getLogger(__name__)

LOCAL_NAME = "smollm2-local"
LOCAL_MODEL = "smollm2-135m"  # the decoder preset's model (models.resolve_model)
STARTUP_S = 600.0  # the most a start may take (a loaded 2-core machine loads the model in ~10 s)
STOP_S = 15.0
# torch threads of the server (unless OMP_NUM_THREADS says otherwise): a 135M model's generation
# is bound by per-token overhead, and on a busy machine idle threads spin. Measured on the 2-core
# machine under load, two judge answers of 78 tokens: 12.5 s CPU (24 s) with one thread, 108 s
# CPU (128 s) with the default two.
SERVER_THREADS = "1"
WEAK_JUDGE_NOTE = ("The default judge is SmolLM2-135M-Instruct served offline by `transformers serve`: a 135M model "
                   "is a weak judge (it copies the worked example's form and reasons and rates with little regard to "
                   "the concept); it shows that the whole path runs offline. Give --judge a capable model for "
                   "judgements that mean something.")
WEAK_LABELLER_NOTE = ("These labels were written and scored by the offline default, SmolLM2-135M-Instruct: a 135M "
                      "model seldom draws the same name twice (for 10 of the default run's VQLC concepts, no two of "
                      "three samples agreed), so few names are kept, and a kept name's detection score rests on its "
                      "yes/no answers. It shows that the path runs offline; give `vqlc label --judge` a capable model "
                      "for labels that mean something.")
# transformers serve's generation config for SmolLM2 is greedy whatever the temperature; sampling
# (the labels' three samples) must be switched on per request. Temperature 0 stays greedy.
SAMPLING_BODY = {"generation_config": '{"do_sample": true}'}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_endpoint(cache_dir: str | Path) -> Endpoint:
    """The offline default judge, not started yet: SmolLM2-135M-Instruct's local model directory
    (converted from its GGUF once, by the project's own `resolve_model`)."""
    source = resolve_model(LOCAL_MODEL, cache_dir=Path(cache_dir))
    model_dir = str(Path(source.path).resolve())
    return Endpoint(name=LOCAL_NAME, base_url="", model=model_dir, concurrency=1,
                    record_as=f"transformers-serve/{Path(model_dir).name}", extra_body=SAMPLING_BODY,
                    managed=model_dir)


def _die_with_parent() -> None:  # runs in the child before exec (Linux): SIGTERM when vqlc dies
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _check_installed() -> None:
    missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
    if missing:
        raise RunError(f"`transformers serve` needs {', '.join(missing)} (transformers[serving]); install the "
                       "project's requirements with `pip install -r requirements.txt`.")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-300:]


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the server, then kill it if it has not exited within STOP_S."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def transformers_serve(model_dir: str | Path, log_path: str | Path, port: int | None = None,
                       startup_s: float = STARTUP_S) -> Iterator[str]:
    """Serve `model_dir` with `transformers serve` on 127.0.0.1 for the block; yields the
    OpenAI base URL. Waits (at most `startup_s`) until /health answers, fails in one sentence
    when the server exits first, and stops the server when the block ends, however it ends."""
    _check_installed()
    port = port or free_port()
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", SERVER_THREADS)}
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--device", "cpu", "--log-level", "warning"]
    log.info("vqlc: starting `transformers serve` with %s on 127.0.0.1:%d (log: %s)", Path(model_dir).name, port,
             log_path)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    try:
        deadline = time.monotonic() + startup_s
        while not _healthy(port):
            if proc.poll() is not None:
                raise RunError(f"`transformers serve` exited with status {proc.returncode} before it answered "
                               f"({_tail(log_path) or 'no output'}); see {log_path}.")
            if time.monotonic() > deadline:
                raise RunError(f"`transformers serve` did not answer on port {port} within {startup_s:.0f} s; see "
                               f"{log_path}.")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


@contextmanager
def opened(endpoint: Endpoint, log_dir: str | Path) -> Iterator[Endpoint]:
    """`endpoint` ready for requests: a managed one served for the block (and stopped after),
    any other checked to be listening."""
    if not endpoint.managed:
        check_reachable(endpoint)
        yield endpoint
        return
    log.info("vqlc: %s", WEAK_JUDGE_NOTE)
    with transformers_serve(endpoint.managed, Path(log_dir) / "serve.log") as url:
        yield started(endpoint, url)


class Session:
    """A ChatClient for `endpoint` whose server is started (the offline default) or checked to be
    listening, then probed with one chat request (`ChatClient.probe`), only when a batch holds a
    request the record cannot answer, from the caller's thread; a started server is stopped when
    the block ends."""

    def __init__(self, endpoint: Endpoint, records: Records, log_dir: str | Path):
        self.client = ChatClient(endpoint, records)
        self.log_dir = Path(log_dir)
        self._stack = ExitStack()
        self._open = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def complete_many(self, requests: list[Request], desc: str = "requests") -> list[Answer]:
        if not self._open and self.client.pending(requests):
            self.client.use(self._stack.enter_context(opened(self.client.endpoint, self.log_dir)))
            self._open = True
            self.client.probe()  # an endpoint that cannot chat is named before the work is sent
        return self.client.complete_many(requests, desc)


def endpoints(specs: list[str] | None, cache_dir: str | Path) -> list[Endpoint]:
    """The endpoints of --judge options: each 'local' (or none given) is the offline default,
    anything else a `name=...,url=...,model=...` spec (`endpoint.parse_endpoint`)."""
    return [local_endpoint(cache_dir) if s.strip() == "local" else parse_endpoint(s) for s in (specs or ["local"])]
