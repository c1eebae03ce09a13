"""The Python client raises the Python API's own errors from error responses."""

from __future__ import annotations

import pytest

from coordinator import AuthError, Forbidden, PathError, ScopeExists, UnknownScope
from coordinator.client import ClientError, CorralClient

from .server_fixtures import serve


@pytest.mark.slow
async def test_client_maps_error_responses_to_exceptions(tmp_path, sample_repo):
    """Each error response becomes the same exception class the Python API raises."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "a")
        with pytest.raises(ScopeExists):
            await c.fork("root", "a")
        with pytest.raises(UnknownScope):
            await c.write("nope", "x", b"")
        with pytest.raises(PathError):
            await c.write("a", "../x", b"")
        with pytest.raises(FileNotFoundError):
            await c.read("a", "nothing.txt")
        with pytest.raises(IsADirectoryError):
            await c.read("a", "src")
        with pytest.raises(ClientError) as e:
            await c.request("POST", "/v1/scopes/a/write", json_body={"bogus": 1})
        assert e.value.status == 422 and e.value.error == "ValidationError"
        async with CorralClient(srv.url) as anonymous:
            with pytest.raises(AuthError):
                await anonymous.scopes()
            assert (await anonymous.health())["ok"] is True
        token = (await c.fork("root", "b")).token
        with pytest.raises(Forbidden):
            await c.with_token(token).discard("a")
