"""Fixtures of the agents' tests: no provider keys from the environment, and a
scripted model server on loopback that the real SDKs talk to (`served`, in the root
conftest, since the coordinator's settings tests use it too)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agents.model_server import ScriptedModelServer


@pytest.fixture(autouse=True)
def _no_keys(no_keys: None) -> None:
    """Tests never pick up a real key (or a real endpoint) from the environment."""


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as running:
        yield running
