"""Fixtures of the agents' tests: no provider keys from the environment, and a
scripted model server on loopback that the real SDKs talk to."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio

from agents.model_server import Script, ScriptedModelServer
from tests.agents._helpers import NO_KEYS


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a real key (or a real endpoint) from the environment."""
    for name in NO_KEYS:
        monkeypatch.delenv(name, raising=False)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as running:
        yield running


@pytest.fixture
def served() -> Iterator[Callable[[dict[str, Script]], str]]:
    """Starts a ScriptedModelServer on its own loop in a thread; returns its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[ScriptedModelServer] = []

    def start(scripts: dict[str, Script]) -> str:
        server = ScriptedModelServer()
        for model, script in scripts.items():
            server.script(model, script)
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        servers.append(server)
        return server.base_url

    yield start
    for server in servers:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
