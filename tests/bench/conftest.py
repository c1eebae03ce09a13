"""Fixtures of the bench tests: the calc repository and its environment cache (the
grading and task-state tests), the scripted model server (the team and merge tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.model_server import ScriptedModelServer
from tests.agents._helpers import NO_KEYS
from tests.bench._calc import make_calc_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The calc repository (`tests.bench._calc`), base commit on branch `base`."""
    return make_calc_repo(tmp_path)


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One environment build for the module; later benches unpack it."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModelServer]:
    """The scripted server on a loop of its own (the harness runs its own loop)."""
    for name in NO_KEYS:
        monkeypatch.delenv(name, raising=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedModelServer()
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    yield srv
    asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
