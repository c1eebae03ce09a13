"""Fixtures of the agents' tests: no provider keys from the environment, and a
scripted model server on loopback that the real SDKs talk to."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agents.model_server import ScriptedModelServer
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
