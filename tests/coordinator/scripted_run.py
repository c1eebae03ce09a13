"""A scripted two-agent run against a real server, for the dashboard's browser tests.

`scripted_run` serves a state directory on 127.0.0.1 (conflict guard on, writes under
`held/` held at the human gate) and drives it over HTTP and in process as agents
would: alice edits src/app.py and makes one real model call (the `openai` SDK against
the local scripted model server); bob's write of the same lines is blocked, he adds a
module, runs a failing command and is rewound past it by the supervisor; a short-lived
helper scope `docs` edits README.md, is merged into root and discarded; bob then edits
the same line with the guard stepped aside for that one write (what merged stays claimed,
so the guard would block it) and root merges alice, so a dry run of bob into root
conflicts in README.md; last,
bob's write of `held/notes.md` waits at the gate (the task is `Run.held`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agents import ModelCaller
from agents.model_server import ScriptedModelServer
from agents.providers import ModelRequest, OpenAIProvider, UserMessage
from coordinator import ConflictGuard
from coordinator.policies import GateRule
from coordinator.records._wire import ResultOut

from .server_fixtures import Served, held_at_gate, serve

APP_ALICE = "".join(f"line {i}\n" if i != 10 else "line 10 by alice\n" for i in range(1, 21))
APP_BOB = "".join(f"line {i}\n" if i != 10 else "line 10 by bob\n" for i in range(1, 21))
POW = "def power(a, b):\n    return a ** b\n"


@dataclass
class Run:
    srv: Served
    held: asyncio.Task[ResultOut]
    """bob's write of held/notes.md, waiting at the gate."""
    commits: dict[str, str]
    """Named commits of the run: alice_write, model_call, bob_blocked, bob_exec, ..."""


@asynccontextmanager
async def scripted_run(state: Path, repo: Path) -> AsyncIterator[Run]:
    async with ScriptedModelServer() as models, \
            serve(state, repo, gate=[GateRule.parse("fs.write:held/*")]) as srv:
        c = srv.client
        commits: dict[str, str] = {}
        await c.fork("root", "alice")
        await c.fork("root", "bob")
        r = await c.write("alice", "src/app.py", APP_ALICE.encode())
        assert r.ok
        commits["alice_write"] = r.commit or ""

        models.script("m", ["I changed line 10 of src/app.py."])
        request = ModelRequest(model="m", system="You edit code.",
                               messages=(UserMessage(text="Change line 10 of src/app.py."),))
        async with OpenAIProvider("m", base_url=models.base_url) as provider:
            caller = ModelCaller(srv.hub.coordinator, provider)
            result = await caller.call(srv.hub.coordinator.scopes["alice"], request)
        assert result.effect.kind == "model.call"
        commits["model_call"] = srv.hub.coordinator.scopes["alice"].head

        r = await c.write("bob", "src/app.py", APP_BOB.encode())
        assert r.status == "blocked", r
        commits["bob_blocked"] = r.commit or ""
        r = await c.write("bob", "src/pow.py", POW.encode())
        assert r.ok
        commits["bob_pow"] = r.commit or ""
        x = await c.exec("bob", ["sh", "-c", "echo 'FAILED test_power'; exit 3"])
        assert x.ok and x.returncode == 3
        commits["bob_exec"] = x.commit or ""
        r = await c.rewind("bob", steps=1)
        assert r.ok
        commits["bob_rewind"] = r.commit or ""

        await c.fork("root", "docs")
        r = await c.write("docs", "README.md", b"# sample, documented by docs\n")
        assert r.ok
        commits["docs_readme"] = r.commit or ""
        m = await c.merge("root", "docs")
        assert m.ok and m.commit
        commits["root_merge_docs"] = m.commit
        await c.discard("docs")
        # The dashboard needs a conflict to preview: this one write gets past the guard
        # (which keeps docs' merged line claimed) as an unguarded agent's would.
        chain = srv.hub.coordinator.chain.policies
        at = next(i for i, p in enumerate(chain) if isinstance(p, ConflictGuard))
        guard = chain.pop(at)
        try:
            r = await c.write("bob", "README.md", b"# sample, as bob sees it\n")
        finally:
            chain.insert(at, guard)
        assert r.ok, r
        commits["bob_readme"] = r.commit or ""
        m = await c.merge("root", "alice")
        assert m.ok and m.commit
        commits["root_merge"] = m.commit
        dry = await c.merge("root", "bob", dry_run=True)
        assert not dry.ok and [x.path for x in dry.conflicts] == ["README.md"]

        async with c.subscribe(scopes="bob", types="decision") as events:
            held = asyncio.create_task(c.write("bob", "held/notes.md", b"notes from bob\n"))
            await held_at_gate(c, events)
        try:
            yield Run(srv, held, commits)
        finally:
            if not held.done():
                for item in await c.gate_pending():
                    await c.reject(item.id, "test over")
                await asyncio.wait_for(held, 10)
