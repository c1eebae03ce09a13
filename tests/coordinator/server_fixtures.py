"""Shared helpers for the server tests: a real server on 127.0.0.1 and clients."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from coordinator.client import CorralClient
from coordinator.records._wire import GateItem
from coordinator.server import ServerConfig, make_app
from coordinator.server._hub import HUB, Hub

ADMIN = "a.test-admin-token"


@dataclass
class Served:
    app: web.Application
    server: TestServer
    client: CorralClient
    url: str

    @property
    def hub(self) -> Hub:
        return self.app[HUB]


@asynccontextmanager
async def serve(state: Path, repo: Path | None, **config: object) -> AsyncIterator[Served]:
    """A real server (aiohttp TestServer on 127.0.0.1, a free port) and an admin client."""
    config.setdefault("admin_token", ADMIN)
    app = make_app(ServerConfig(state=state, repo=repo, **config))  # type: ignore[arg-type]
    async with TestServer(app, host="127.0.0.1", port=0) as server:
        url = str(server.make_url("")).rstrip("/")
        async with CorralClient(url, ADMIN) as client:
            yield Served(app, server, client, url)


async def held_at_gate(client: CorralClient, events: AsyncIterator[dict[str, Any]],
                       within: float = 10.0) -> GateItem:
    """The item held next at the gate, once announced on `events` (a stream entered
    before the intent was proposed); fails the test after `within` seconds."""
    try:
        async with asyncio.timeout(within):
            return await client.next_held(events)
    except TimeoutError:
        raise AssertionError(f"nothing was held at the gate within {within} s") from None


async def serve_process(state: Path, repo: Path | None,
                        admin: str) -> tuple[subprocess.Popen[str], str]:
    """`corral serve` as a real process (so a test can SIGKILL it) on a free port:
    the process and its URL, once it listens."""
    argv = [sys.executable, "-m", "coordinator.cli", "serve", "--state", str(state),
            "--port", "0"]
    if repo is not None:
        argv += ["--repo", str(repo)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2],
                            env={**os.environ, "CORRAL_ADMIN_TOKEN": admin})
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    assert line.startswith("listening on "), line
    return proc, line.split()[-1]
