"""The API's schema and its behaviour agree (issue 9, finding 18): strict
types, argv as documented, 405 with Allow, and a short body ends in 408."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from .server_fixtures import serve


@pytest.fixture
async def srv(tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo, body_timeout=1.0) as s:
        await s.client.fork("root", "a")
        await s.client.fork("root", "b")
        yield s


async def _post(srv, path: str, body: bytes) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.url + path, data=body,
                          headers={"Authorization": "Bearer " + srv.client.token,
                                   "Content-Type": "application/json"}) as r:
            return r.status, await r.json()


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/scopes/a/rewind", b'{"steps": false}'),
    ("/v1/scopes/a/rewind", b'{"steps": true}'),
    ("/v1/scopes/a/rewind", b'{"steps": "1"}'),
    ("/v1/scopes/a/merge", b'{"other": "b", "dry_run": 0}'),
    ("/v1/scopes/a/merge", b'{"other": "b", "dry_run": "yes"}'),
    ("/v1/scopes/a/exec", b'{"argv": ["true"], "network": 1}'),
])
@pytest.mark.slow
async def test_wrong_json_types_are_422_not_coerced(srv, path, body):
    """`false` is not 0 and `0` is not false: the body is refused, nothing recorded."""
    head = srv.hub.coordinator.scope("a").head
    status, payload = await _post(srv, path, body)
    assert (status, payload["error"]) == (422, "ValidationError"), payload
    assert srv.hub.coordinator.scope("a").head == head


@pytest.mark.slow
async def test_argv_schema_and_behaviour_agree(srv):
    """The schema says argv[0] is non-empty; an empty program is a 422, an
    empty later argument runs."""
    async with aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/openapi.json") as r:
            doc = await r.json()
    schema = doc["components"]["schemas"]["ExecRequest"]["properties"]["argv"]
    assert schema["prefixItems"][0]["minLength"] == 1
    status, payload = await _post(srv, "/v1/scopes/a/exec", b'{"argv": [""]}')
    assert status == 422, payload
    status, payload = await _post(srv, "/v1/scopes/a/exec", b'{"argv": ["true", ""]}')
    assert status == 200 and payload["returncode"] == 0, payload


async def test_405_names_the_allowed_methods(srv):
    """A wrong method gets 405 with an Allow header, as HTTP requires."""
    async with aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/v1/scopes/root/write",
                         headers={"Authorization": "Bearer " + srv.client.token}) as r:
            assert r.status == 405
            assert "POST" in r.headers.get("Allow", "")
            assert (await r.json())["error"] == "MethodNotAllowed"


@pytest.mark.slow
async def test_a_body_shorter_than_its_content_length_ends_in_408(srv):
    """A client that promises 100 bytes and sends 10 gets 408 after the body
    timeout (1 s here) and the connection is closed; nothing is written."""
    host, port = srv.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = srv.hub.coordinator.scope("a").head
    writer.write(b"POST /v1/scopes/a/write HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer " + srv.client.token.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                 b'{"path": "')
    await writer.drain()
    start = time.monotonic()
    answer = await asyncio.wait_for(reader.read(65536), 10)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"RequestTimeout" in answer
    # and the server ends the connection (the rest of the body may never come)
    while chunk := await asyncio.wait_for(reader.read(65536), 10):
        answer += chunk
    assert time.monotonic() - start < 5
    writer.close()
    assert srv.hub.coordinator.scope("a").head == head
