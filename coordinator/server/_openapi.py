"""The route table and the OpenAPI 3.1 document generated from it.

Every HTTP route is declared once as a `Route` (method, path, handler, request
and response models, query parameters, who may call it); the aiohttp router
and `/openapi.json` are both built from the same table, so nothing can be
served undocumented. Schemas come from the pydantic models (`model_json_schema`,
JSON Schema 2020-12, which OpenAPI 3.1 uses as is).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..records._wire import API_VERSION, ErrorOut

__all__ = ["Query", "Route", "openapi"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Auth = Literal["none", "token", "admin"]


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    description: str
    required: bool = False
    many: bool = False
    type: Literal["string", "integer", "number"] = "string"


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    query: tuple[Query, ...] = ()
    auth: Auth = "token"
    websocket: bool = False
    content_type: str = "application/json"
    tag: str = "scopes"


_ERRORS = {
    "400": "Bad input (PathError, PatchError, RewindError, malformed JSON)",
    "401": "Missing or invalid token",
    "403": "The token may not act here",
    "404": "Unknown scope, commit, file or held intent",
    "405": "Method not allowed here (the Allow header names the allowed ones)",
    "408": "The body did not arrive in time (shorter than its Content-Length?)",
    "409": "Conflicting state (scope exists, discarded, merge refused, a team rule refused)",
    "413": "Body larger than the server's limit",
    "422": "Body does not match the schema (unknown field, wrong type)",
}


def openapi(routes: Sequence[Route], *, title: str = "Corral") -> dict[str, Any]:
    """The OpenAPI 3.1 document describing `routes`."""
    models: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
        (ErrorOut, "serialization")
    ]
    for r in routes:
        if r.body is not None:
            models.append((r.body, "validation"))
        if r.response is not None:
            models.append((r.response, "serialization"))
    keys, defs = models_json_schema(models, ref_template="#/components/schemas/{model}")
    schemas = dict(defs.get("$defs", {}))

    def ref(model: type[BaseModel], mode: str) -> dict[str, Any]:
        return keys[(model, mode)]  # type: ignore[index]

    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        op: dict[str, Any] = {
            "operationId": r.handler.__name__.lstrip("_"),
            "summary": r.summary,
            "tags": [r.tag],
            "parameters": [
                {"name": p, "in": "path", "required": True,
                 "schema": {"type": "string", "minLength": 1}}
                for p in re.findall(r"{(\w+)(?::[^}]*)?}", r.path)
            ] + [
                {"name": q.name, "in": "query", "required": q.required,
                 "description": q.description,
                 "schema": {"type": "array", "items": {"type": q.type}} if q.many
                 else {"type": q.type},
                 **({"style": "form", "explode": True} if q.many else {})}
                for q in r.query
            ],
            "responses": {},
        }
        if r.auth != "none":
            op["security"] = [{"bearer": []}]
            op["description"] = ("Admin token only." if r.auth == "admin" else
                                 "Admin token, or the token of the scope (or an ancestor).")
        if r.body is not None:
            op["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": ref(r.body, "validation")}}}
        if r.websocket:
            op["responses"]["101"] = {"description": "WebSocket upgrade; see the summary"}
            op["x-websocket"] = True
        elif r.response is not None:
            op["responses"]["200"] = {"description": "OK", "content": {
                r.content_type: {"schema": ref(r.response, "serialization")}}}
        else:
            op["responses"]["200"] = {"description": "OK", "content": {
                r.content_type: {"schema": {"type": "string"}}}}
        for code, text in _ERRORS.items():
            op["responses"][code] = {"description": text, "content": {
                "application/json": {"schema": ref(ErrorOut, "serialization")}}}
        path = re.sub(r"{(\w+):[^}]*}", r"{\1}", r.path)
        paths.setdefault(path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": API_VERSION,
                 "description": "Corral's coordinator API. File contents are base64 "
                                "(`content_b64`). Tokens: `Authorization: Bearer <token>`."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
