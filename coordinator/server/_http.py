"""What every handler of the API does with a request: find the caller, read a body
within the server's time limit, answer with a model's JSON."""

from __future__ import annotations

import asyncio
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel

from ._auth import Principal
from ._hub import HUB, Hub

__all__ = ["body", "caller", "json_response"]

M = TypeVar("M", bound=BaseModel)


def json_response(model: BaseModel) -> web.Response:
    return web.Response(body=model.model_dump_json().encode(), content_type="application/json")


async def body(request: web.Request, model: type[M]) -> M:
    """The request's body as `model` (an empty body as `{}`)."""
    # A client that sends less than its Content-Length gets 408, instead of
    # holding the connection (and its handler) forever.
    try:
        raw = await asyncio.wait_for(request.read(), request.app[HUB].config.body_timeout)
    except TimeoutError as e:
        raise web.HTTPRequestTimeout(
            text=f"the request body did not arrive within "
                 f"{request.app[HUB].config.body_timeout:g} s (shorter than its Content-Length?)"
        ) from e
    return model.model_validate_json(raw if raw.strip() else b"{}")


def caller(request: web.Request) -> tuple[Hub, Principal]:
    """The server's state and who is calling (from the bearer token)."""
    hub = request.app[HUB]
    return hub, hub.who(request)
