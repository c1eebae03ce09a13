"""mini-swe-agent (the real package) solves a small task in a Corral scope, against the local
scripted model server through the real OpenAI SDK: one action blocked, one rewound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("minisweagent")

from agents import ModelCaller, step_commit
from agents.miniswe import BLOCKED_RETURNCODE, MiniSweAgent
from agents.model_server import Reply, ScriptedModelServer
from agents.providers import OpenAIProvider
from coordinator import ConflictGuard, Coordinator, ExecOutcome
from coordinator.cli import app
from tests.agents._helpers import CALC, call, steps_of
from tests.conftest import git, make_repo

ALICE = CALC + "\n\ndef multiply(a, b):\n    return a * b\n"
TEST = "python3 -c 'from power import power; assert power(2, 3) == 8, power(2, 3)'"
SCRIPT = [
    call("bash", command="cat calc.py"),
    # alice owns the end of calc.py: the guard blocks this command's change.
    call("bash", command="printf '\\n\\ndef power(a, b):\\n    return a ** b\\n' >> calc.py"),
    call("bash", command="printf 'def power(a, b):\\n    return a * b\\n' > power.py"),
    call("bash", command=TEST),  # fails: the supervisor rewinds to before step 3
    call("bash", command="printf 'def power(a, b):\\n    return a ** b\\n' > power.py"),
    call("bash", command=TEST),
    call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
]


def _contents(payload: dict) -> str:
    return json.dumps(payload["messages"])


@pytest.mark.slow
async def test_mini_swe_agent_in_a_scope_blocked_and_rewound(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """Every bash action is a reviewed exec (the guard's block comes back as the command's
    output), every query a model.call effect, a supervisor's rewind rewinds the agent's
    conversation with the files, and the result's patch is the scope's diff."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    server.script("m", SCRIPT)
    provider = OpenAIProvider("m", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "state", repo=repo, base="HEAD",
                                policies=[ConflictGuard()]) as coord:
        alice = await coord.root.fork("alice")
        assert (await alice.write("calc.py", ALICE.encode())).ok
        bob = await coord.root.fork("bob")
        rewound: list[str] = []

        async def supervise() -> None:
            """Rewind bob to before step 3 once a command of his has failed."""
            if rewound:
                return
            for e in coord.trace.log(bob.head):
                out = e.effect.outcome if e.effect else None
                if isinstance(out, ExecOutcome) and out.returncode != 0:
                    target = step_commit(coord.trace, bob.head, 3)
                    assert (await bob.rewind(to=target)).ok
                    rewound.append(target)
                    return

        agent = MiniSweAgent(coord, bob, ModelCaller(coord, provider), "add power() to calc",
                             before_step=supervise)
        result = await agent.run()
        await provider.aclose()

        assert result.status == "finished", result
        assert result.blocked == 1 and rewound and agent.rebuilt == 1
        assert result.steps == 5  # steps 1, 2, then 5, 6, 7 on the rewound line
        assert "+++ b/power.py" in result.patch and "a ** b" in result.patch
        assert "calc.py" not in result.patch
        assert await bob.read("power.py") == b"def power(a, b):\n    return a ** b\n"
        assert await bob.read("calc.py") == CALC.encode()
        assert result.prompt_tokens > 0 and result.completion_tokens > 0

        entries = coord.trace.log(bob.head)
        effects = [e.effect for e in entries if e.effect is not None]
        kinds = [(e.kind, e.status) for e in effects]
        assert ("exec", "blocked") in kinds and ("scope.rewind", "materialized") in kinds
        assert sum(k == ("model.call", "materialized") for k in kinds) == 5
        blocked = next(e for e in effects if e.kind == "exec" and e.status == "blocked")
        assert blocked.decision is not None and blocked.decision.policy == "conflict-guard"
        assert blocked.cause is not None and blocked.cause.startswith("bob#")

    # The model saw the block as the command's output, with the guard's reason.
    third = server.requests[2].json()
    assert "BLOCKED by the supervisor (conflict-guard)" in _contents(third)
    observation = third["messages"][-1]
    assert observation["role"] == "tool"
    assert f'"returncode": {BLOCKED_RETURNCODE}' in observation["content"]
    assert "conflict with changes by scope alice" in observation["content"]
    # After the rewind, the 5th request carries the conversation of step 2, not 3 and 4.
    fifth = server.requests[4].json()
    assert "a * b" not in _contents(fifth) and "assert power" not in _contents(fifth)
    assert _contents(fifth) == _contents(third)


def _mini(payload: dict) -> Reply:
    """mini-swe-agent writes mul.py, checks it, submits."""
    step = steps_of(payload)
    plan = [
        call("bash", command="printf 'def mul(a, b):\\n    return a * b\\n' > mul.py"),
        call("bash", command="python3 -c 'import mul; assert mul.mul(2, 3) == 6'"),
        call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    return plan[min(step, len(plan) - 1)]


@pytest.mark.slow
def test_corral_run_with_mini_swe_agent(tmp_path: Path, served) -> None:
    """`corral run --agent mini-swe-agent` runs mini-swe-agent in the task's scope (through the
    corral.agents entry point) and leaves its patch merged as the branch corral/<run-id>."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    url = served({"m": _mini})
    result = CliRunner().invoke(app, [
        "run", "--repo", str(repo), "--task", "add mul.py", "--agent", "mini-swe-agent",
        "--model", "openai/m", "--base-url", url, "--state", str(tmp_path / "state"), "--json",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"], report
    [agent] = report["agents"]
    assert agent["status"] == "finished" and agent["steps"] == 3
    assert report["merges"][0]["outcome"] == "merged"
    assert git(repo, "show", f"{report['branch']}:mul.py") == "def mul(a, b):\n    return a * b\n"


def test_agents_by_name_or_path() -> None:
    """The corral.agents group registers builtin and mini-swe-agent; module:attr loads any
    callable; an unknown name is a LookupError naming the choices."""
    from agents import agent_names, load_agent, miniswe
    from agents.entry import builtin

    assert {"builtin", "mini-swe-agent"} <= set(agent_names())
    assert load_agent("builtin") is builtin
    assert load_agent("mini-swe-agent") is miniswe.run
    assert load_agent("agents.entry:builtin") is builtin
    with pytest.raises(LookupError, match="builtin"):
        load_agent("nobody")
    with pytest.raises(LookupError):
        load_agent("agents.entry:nothing_here")


async def test_mini_swe_agent_replays_from_the_trace(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """mini-swe-agent's requests are byte-stable: re-running its task in a fresh scope with
    a ReplayProvider over the first run's model calls (and no live provider at all) serves
    every step from the trace, for zero tokens, and ends with the same patch."""
    from agents import ReplayProvider
    from agents._transcript import model_calls

    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    server.script("m", _mini)
    provider = OpenAIProvider("m", base_url=server.base_url)
    async with Coordinator.open(tmp_path / "state", repo=repo, base="HEAD") as coord:
        first = await coord.root.fork("first")
        live = await MiniSweAgent(coord, first, ModelCaller(coord, provider), "add mul").run()
        await provider.aclose()
        assert live.status == "finished" and live.steps == 3 and live.replayed_steps == 0
        sent = len(server.requests)

        recorded = [e for _, e in model_calls(coord.trace, first.head)]
        replayer = ReplayProvider(recorded, None, name="openai", model="m")
        again = await coord.root.fork("again")
        result = await MiniSweAgent(coord, again, ModelCaller(coord, replayer), "add mul").run()

        assert result.status == "finished", result
        assert result.replayed_steps == 3 and replayer.diverged_at is None
        assert result.prompt_tokens == 0 and result.saved_tokens > 0
        assert len(server.requests) == sent
        assert result.patch == live.patch and "mul.py" in result.patch
