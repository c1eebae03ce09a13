"""Fixtures of the agents' tests: no provider keys from the environment, and a
scripted model server on loopback that the real SDKs talk to (`served`, in the root
conftest, since the coordinator's settings tests use it too)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agents.model_server import ScriptedModelServer
from tests.agents._rollouts_run import Grown, grown


@pytest.fixture(autouse=True)
def _no_keys(no_keys: None) -> None:
    """Tests never pick up a real key (or a real endpoint) from the environment."""


@pytest.fixture(scope="session")
def rollout_tree(tmp_path_factory: pytest.TempPathFactory) -> Grown:
    """The recorded two-agent run and the tree grown from it (tests/agents/_rollouts_run),
    built once: the rollout tests only read it."""
    return grown(tmp_path_factory.mktemp("rollouts"))


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as running:
        yield running
