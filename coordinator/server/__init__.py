"""The HTTP server: a thin mapping of HTTP onto the same calls a Python user makes.

`make_app(ServerConfig(...))` gives the aiohttp application of one state
directory, `run_server` serves it; `request_scope` and `Route` serve the
extensions that add routes (entry point group `EXTENSION_GROUP`). Errors are
mapped to HTTP statuses here (`STATUS`), not in the error classes.
"""

from ._app import EXTENSION_GROUP, STATUS, is_loopback, make_app, request_scope, run_server
from ._hub import API_ROUTES, ServerConfig
from ._openapi import Query, Route, openapi

__all__ = [
    "API_ROUTES",
    "EXTENSION_GROUP",
    "STATUS",
    "Query",
    "Route",
    "ServerConfig",
    "is_loopback",
    "make_app",
    "openapi",
    "request_scope",
    "run_server",
]
