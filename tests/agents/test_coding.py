"""The built-in coding agent, through the real SDKs against the local scripted model server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agents import CodingAgent, ModelCaller, step_commit
from agents.model_server import Reply, ScriptedModelServer
from agents.providers import AnthropicProvider, ModelRequest, OpenAIProvider, Provider
from coordinator import ConflictGuard, Coordinator, ModelCall, ToolCall
from tests.agents._helpers import CALC, by_step, call
from tests.conftest import make_repo

MUL = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
DIFF = """--- a/calc.py
+++ b/calc.py
@@ -3,3 +3,3 @@
{blank}
 def add(a, b):
-    return a + b
+    return b + a
""".format(blank=" ")

Make = Callable[[ScriptedModelServer], Provider]


def _openai(server: ScriptedModelServer) -> Provider:
    return OpenAIProvider("m", base_url=server.base_url)


def _anthropic(server: ScriptedModelServer) -> Provider:
    return AnthropicProvider("m", base_url=server.anthropic_base_url)



@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"calc.py": CALC, "README.md": "# calc\n"})


@pytest.mark.parametrize("make", [_openai, _anthropic], ids=["openai", "anthropic"])
async def test_tool_loop_edits_runs_and_returns_its_patch(
    tmp_path: Path, repo: Path, server: ScriptedModelServer, make: Make
) -> None:
    """The agent reads, edits (search/replace and unified diff), runs a command and finishes;
    its result is the diff of its scope against its fork point, and every effect names the
    model call that caused it."""
    server.script("m", by_step([
        call("read_file", path="calc.py"),
        call("edit", path="calc.py", old="    return a + b\n",
             new="    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"),
        call("edit", path="calc.py", diff=DIFF),
        call("run", command="python -c 'import calc; print(calc.mul(2, 3))'"),
        call("finish", summary="added mul"),
    ]))
    provider = make(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        result = await CodingAgent(coord, scope, ModelCaller(coord, provider), "add mul").run()
    await provider.aclose()
    assert result.status == "finished" and result.summary == "added mul"
    assert result.steps == 5 and result.prompt_tokens > 0 and result.blocked == 0
    assert "+def mul(a, b):" in result.patch and "+    return b + a" in result.patch
    assert result.patch.startswith("diff --git a/calc.py b/calc.py")


async def test_trace_reads_model_call_effect_tool(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """model.call → the world's effect (cause = the call) → tool.call (cause = the call);
    the request and response are blobs of canonical JSON."""
    server.script("m", by_step([
        call("write_file", path="mul.py", content="def mul(a, b):\n    return a * b\n"),
        call("run", command="echo hi"),
        call("finish", summary="ok"),
    ]))
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        await CodingAgent(coord, scope, ModelCaller(coord, provider), "t").run()
        log = coord.log(scope)
        assert [e.kind for e in log] == [
            "scope.fork", "model.call", "fs.write", "tool.call", "model.call", "exec",
            "tool.call", "model.call", "tool.call",
        ]
        assert log[2].cause == log[1].id and log[3].cause == log[1].id
        assert log[5].cause == log[4].id and log[6].cause == log[4].id
        first = log[1].intent
        assert isinstance(first, ModelCall) and first.provider == "openai" and first.model == "m"
        request = json.loads(coord.trace.blob(first.request))
        assert request["messages"][0] == {"kind": "user", "text": "t"}
        blob = coord.trace.blob(first.request)
        assert ModelRequest.model_validate_json(blob).model_dump_json().encode() == blob
        tool = log[6].intent
        assert isinstance(tool, ToolCall) and tool.tool == "run"
        assert coord.trace.blob(log[6].outcome.result).startswith(b"exit code 0")  # type: ignore[union-attr]
    await provider.aclose()


async def test_blocked_intent_comes_back_with_the_supervisors_reason(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """A write the conflict guard blocks is the tool's result, reason included, and the
    agent carries on."""
    server.script("m", by_step([
        call("write_file", path="calc.py", content=CALC + "\n\ndef power(a, b):\n    pass\n"),
        call("finish", summary="gave up"),
    ]))
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo, policies=[ConflictGuard()]) as coord:
        alice = await coord.root.fork("alice")
        await alice.write("calc.py", MUL.encode())
        bob = await coord.root.fork("bob")
        result = await CodingAgent(coord, bob, ModelCaller(coord, provider), "power").run()
    await provider.aclose()
    assert result.status == "finished" and result.blocked == 1 and result.patch == ""
    second = server.requests[-1].json()["messages"]
    tool_result = next(m for m in second if m["role"] == "tool")
    assert tool_result["content"].startswith("BLOCKED by the supervisor (conflict-guard)")
    assert "scope alice" in tool_result["content"]


async def test_messages_reach_the_other_agent_at_its_next_step(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """send_message puts a message effect on the sender's branch; the receiver sees it as a
    user message in its next request."""
    server.script("a", by_step([call("send_message", to="b", text="I own calc.py"),
                                call("finish", summary="")]))
    server.script("b", by_step([call("list_files", path=""), call("finish", summary="")]))
    pa = OpenAIProvider("a", base_url=server.base_url)
    pb = OpenAIProvider("b", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        a, b = await coord.root.fork("a"), await coord.root.fork("b")
        await CodingAgent(coord, a, ModelCaller(coord, pa), "ta").run()
        assert [e.kind for e in coord.log(a)][2] == "message"
        await CodingAgent(coord, b, ModelCaller(coord, pb), "tb").run()
    for p in (pa, pb):
        await p.aclose()
    b_requests = [r.json() for r in server.requests if r.model == "b"]
    assert b_requests[0]["messages"][-1] == {
        "role": "user", "content": "Message from a: I own calc.py"
    }


async def test_retries_are_recorded_as_failed_attempts(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """A 503 and a 429 are retried; each failed attempt is a failed model.call effect with
    its attempt number and error, and the success is its own effect."""
    server.script("m", by_step([call("finish", summary="ok")]))
    server.fail_next(1, 503)
    server.fail_next(1, 429)
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        caller = ModelCaller(coord, provider, base_delay=0.01)
        result = await CodingAgent(coord, scope, caller, "t").run()
        calls = [e for e in coord.log(scope) if e.kind == "model.call"]
    await provider.aclose()
    assert result.status == "finished" and caller.retries == 2
    assert [(e.status, e.intent.attempt) for e in calls] == [  # type: ignore[union-attr]
        ("failed", 1), ("failed", 2), ("materialized", 3)
    ]
    assert "503" in (calls[0].error or "") and "429" in (calls[1].error or "")
    assert len({e.intent.request for e in calls}) == 1  # type: ignore[union-attr]


async def test_model_error_ends_the_run_and_stays_in_the_trace(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """A non-retryable error (no script for the model: 404) ends the run with status error;
    the failed call is in the trace."""
    provider = OpenAIProvider("unknown", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        result = await CodingAgent(coord, scope, ModelCaller(coord, provider), "t").run()
        assert coord.log(scope)[-1].status == "failed"
    await provider.aclose()
    assert result.status == "error" and "404" in (result.error or "")


async def test_step_and_token_limits(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """An agent that never finishes stops at its step limit, or at its token limit."""
    server.script("m", lambda payload: call("list_files", path=""))
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        a = await coord.root.fork("a")
        r1 = await CodingAgent(coord, a, ModelCaller(coord, provider), "t", max_steps=3).run()
        b = await coord.root.fork("b")
        r2 = await CodingAgent(coord, b, ModelCaller(coord, provider), "t",
                               max_tokens=1).run()
    await provider.aclose()
    assert (r1.status, r1.steps) == ("step_limit", 3)
    assert (r2.status, r2.steps) == ("token_limit", 1)


async def test_rewind_rewinds_the_conversation(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """After a rewind to before step 2, the agent rebuilds its context from the trace: its
    next request is byte-identical to the recorded request of step 2, and the files are
    those of that point."""
    server.script("m", by_step([
        call("write_file", path="one.txt", content="1\n"),
        call("write_file", path="two.txt", content="2\n"),
        call("finish", summary="done"),
    ]))
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        agent = CodingAgent(coord, scope, ModelCaller(coord, provider), "t")
        assert (await agent.run()).status == "finished"
        step2 = [r.body for r in server.requests][1]
        await scope.rewind(to=step_commit(coord.trace, scope.head, 2))
        assert not (scope.path / "two.txt").exists() and (scope.path / "one.txt").exists()
        result = await agent.run()
        assert result.status == "finished" and (scope.path / "two.txt").exists()
    await provider.aclose()
    assert len(server.requests) == 5
    assert server.requests[3].body == step2


async def test_text_reply_ends_the_run(tmp_path: Path, repo: Path, server: ScriptedModelServer):
    """A reply with no tool call ends the agent's work with that text as its summary."""
    server.script("m", [Reply("nothing to do")])
    provider = _openai(server)
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        result = await CodingAgent(coord, scope, ModelCaller(coord, provider), "t").run()
    await provider.aclose()
    assert (result.status, result.summary, result.steps) == ("finished", "nothing to do", 1)


async def test_builtin_agent_takes_a_context(
    tmp_path: Path, repo: Path, server: ScriptedModelServer
) -> None:
    """`builtin(AgentContext)` is the CodingAgent on the context's provider and budget: it
    stops at `budget.max_steps`, and without messaging the model is offered no
    send_message tool and not told about it."""
    from agents import AgentContext, Budget, load_agent
    from agents.providers import ScriptedProvider

    provider = ScriptedProvider([call("read_file", path="calc.py")] * 3)
    agent = load_agent("builtin")
    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        result = await agent(AgentContext(coord, scope, "t", provider, Budget(max_steps=2),
                                          name="w", messaging=False))
    assert result.status == "step_limit" and result.steps == 2
    [first, *_] = provider.requests
    assert "send_message" not in {t.name for t in first.tools}
    assert "send_message" not in first.system and "read_file" in first.system


async def test_builtin_agent_refuses_an_unknown_tool(tmp_path: Path, repo: Path) -> None:
    """A context naming a tool the builtin agent lacks is a ValueError before any model
    call; the tools it names are the only ones offered."""
    from agents import AgentContext, CodingAgent
    from agents.providers import ScriptedProvider

    async with Coordinator.open(tmp_path / "s", repo) as coord:
        scope = await coord.root.fork("w")
        ctx = AgentContext(coord, scope, "t", ScriptedProvider(), tools=("read_file", "fly"))
        with pytest.raises(ValueError, match="fly"):
            CodingAgent.from_context(ctx)
        only = CodingAgent.from_context(AgentContext(coord, scope, "t", ScriptedProvider(),
                                                     tools=("read_file", "finish")))
        assert [t.name for t in only.tools] == ["read_file", "finish"]
