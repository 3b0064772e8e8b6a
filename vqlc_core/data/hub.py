"""The Hugging Face hub as a source of models: whether a `--model` value names a hub model, and
whether the hub answers now. Both are found in a few seconds without importing torch, so a build
asked for a hub model it cannot reach stops before it reads any data.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from vqlc_core.base.runio import SourceError

log = logging.getLogger(__name__)

PRESET_NAMES = ("minilm", "smollm2-135m")  # bundled: they load from cache/, never from the hub
HUB_HELP = "give --model a local directory, a .gguf file, or one of the offline presets: minilm, smollm2-135m"
CONNECT_TIMEOUT_S = 3.0  # a network that drops packets is taken for offline after this long


def is_hub_name(spec: str) -> bool:
    """Whether `spec` can only name a model on the hub.

    Args:
        spec: a `--model` value.

    Returns:
        True for an `org/name` string that is neither a preset nor a path that exists, nor a
        path-like string (starting with `/`, `.` or `~`, or ending in `.gguf`).

    Examples:
        >>> is_hub_name("meta-llama/Llama-3.2-1B"), is_hub_name("minilm")
        (True, False)
    """
    if spec in PRESET_NAMES or spec.lower().endswith(".gguf") or Path(spec).expanduser().exists():
        return False
    return spec.count("/") == 1 and not spec.startswith(("/", ".", "~"))


def hub_reachable(timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether the hub may be reached: False when it certainly cannot, to fail at once instead of
    after minutes of retries.

    Args:
        timeout: seconds to wait for a connection to the hub's host.

    Returns:
        False when `HF_HUB_OFFLINE` is set, the host has no address, or no connection opens
        within `timeout`; True otherwise, and behind a proxy (which resolves names itself).
    """
    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # the proxy resolves names; let the download try
    url = urlparse(hub.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
        return True
    except OSError as err:
        log.debug("the hub at %s is out of reach: %s", hub.ENDPOINT, err)
        return False


def hub_failure(spec: str) -> SourceError:
    """The one sentence for a hub model that could not be loaded."""
    return SourceError(f"Model '{spec}' could not be loaded from the Hugging Face hub (offline or not found); "
                       f"{HUB_HELP}.")


def check_hub(spec: str) -> None:
    """Raise when `spec` names a hub model and the hub is out of reach.

    Args:
        spec: a `--model` value.

    Raises:
        SourceError: `spec` is a hub name and `hub_reachable()` is False.
    """
    if is_hub_name(spec) and not hub_reachable():
        raise hub_failure(spec)
