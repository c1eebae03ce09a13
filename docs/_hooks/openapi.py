"""MkDocs hook: the HTTP API page is rendered at build time from the server's own
OpenAPI document (the one `GET /openapi.json` serves), so it cannot drift from the code.

It writes `api/openapi.json` into the site and replaces the `<!-- openapi -->` marker of
`api/http.md` with one section per route and one table per schema. Offline: no JS, no CDN.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

MARKER = "<!-- openapi -->"
PAGE = "api/http.md"


def openapi_document() -> dict[str, Any]:
    """The document `corral serve` serves, extensions (the MCP route) included."""
    from coordinator.server import API_ROUTES, ServerConfig, make_app, openapi

    with tempfile.TemporaryDirectory() as state:
        app = make_app(ServerConfig(Path(state)))
        return openapi(app[API_ROUTES])


_doc: dict[str, Any] | None = None


def _document() -> dict[str, Any]:
    global _doc
    if _doc is None:
        _doc = openapi_document()
    return _doc


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "api/openapi.json",
                                content=json.dumps(_document(), indent=2) + "\n"))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    return markdown.replace(MARKER, render(_document()))


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in schema or "oneOf" in schema:
        return " \\| ".join(_type(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra) if isinstance(extra, dict) else 'any'}"
    return str(kind)


def _anchor(name: str) -> str:
    return "schema-" + name.lower().replace("_", "-")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(doc: dict[str, Any]) -> str:
    out: list[str] = []
    paths = doc.get("paths", {})
    errors = next(iter(next(iter(paths.values())).values()))["responses"]
    out.append("## Errors\n")
    out.append("Every route may answer these, with an [ErrorOut](#schema-errorout) body:\n")
    out.append("| status | when |")
    out.append("|---|---|")
    for status, resp in errors.items():
        if status not in ("101", "200"):
            out.append(f"| {status} | {_cell(resp.get('description', ''))} |")
    out.append("")
    out.append("## Routes\n")
    out.append("| method | path | summary | auth |")
    out.append("|---|---|---|---|")
    rows = []
    for path, item in paths.items():
        for method, op in item.items():
            anchor = f"{method}-{path}".lower()
            anchor = "".join(c if c.isalnum() else "-" for c in anchor).strip("-")
            auth = ("none" if "security" not in op else
                    "admin" if op.get("description", "").startswith("Admin token only")
                    else "scope token or admin")
            rows.append((path, method, op, anchor, auth))
            out.append(f"| `{method.upper()}` | [`{path}`](#{anchor}) | "
                       f"{_cell(op.get('summary', ''))} | {auth} |")
    out.append("")
    for path, method, op, anchor, auth in rows:
        out.append(f"### `{method.upper()} {path}` {{#{anchor}}}\n")
        if op.get("summary"):
            out.append(_cell(op["summary"]) + "\n")
        out.append(f"Auth: **{auth}**.\n")
        params = op.get("parameters", [])
        if params:
            out.append("| parameter | in | type | required | description |")
            out.append("|---|---|---|---|---|")
            for p in params:
                out.append(f"| `{p['name']}` | {p.get('in', '')} | "
                           f"{_type(p.get('schema', {}))} | {p.get('required', False)} | "
                           f"{_cell(p.get('description', ''))} |")
            out.append("")
        body = op.get("requestBody", {}).get("content", {})
        for media, spec in body.items():
            out.append(f"Request body ({media}): {_type(spec.get('schema', {}))}\n")
        responses = op.get("responses", {})
        if responses:
            out.append("| status | answer |")
            out.append("|---|---|")
            for status, resp in responses.items():
                if status not in ("101", "200"):
                    continue  # the same error answers on every route: listed once above
                schema = next(iter(resp.get("content", {}).values()), {}).get("schema")
                what = _cell(resp.get("description", ""))
                if schema:
                    what += f" ({_type(schema)})"
                out.append(f"| {status} | {what} |")
            out.append("")
    out.append("## Schemas\n")
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        out.append(f"### {name} {{#{_anchor(name)}}}\n")
        if schema.get("description"):
            out.append(_cell(schema["description"]) + "\n")
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            out.append("| field | type | required | description |")
            out.append("|---|---|---|---|")
            for field, fs in props.items():
                out.append(f"| `{field}` | {_type(fs)} | {field in required} | "
                           f"{_cell(fs.get('description', ''))} |")
            out.append("")
        elif "oneOf" in schema or "anyOf" in schema:
            out.append(f"One of: {_type(schema)}\n")
    return "\n".join(out)
