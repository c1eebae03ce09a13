"""API key lookup shared by the SDK-backed providers."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ._errors import ModelError

__all__ = ["api_key_for"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def api_key_for(explicit: str | None, env_var: str, base_url: str | None) -> str:
    """Returns the key to send: `explicit`, else `$env_var`, else a dummy for a loopback server.

    Local servers (vLLM, Ollama, the scripted model server) ignore the key, so requiring one
    there would only make people export fake keys.

    Raises:
        ModelError: no key is given or set and `base_url` is not on loopback.
    """
    if explicit:
        return explicit
    from_env = os.environ.get(env_var)
    if from_env:
        return from_env
    if base_url is not None and urlsplit(base_url).hostname in _LOOPBACK:
        return "local"
    raise ModelError(f"{env_var} is not set: export it (from Python, api_key= works "
                     "too); a --base-url on loopback needs no key")
