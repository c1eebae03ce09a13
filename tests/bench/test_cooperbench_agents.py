"""The builtin coding agent in the harness (real OpenAI SDK against the local scripted
model server), and agents loaded from `corral.agents` or `module:attr`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply, ScriptedModelServer
from bench.cooperbench import AgentOptions, RunSpec, load_agent, run
from tests.agents._helpers import NO_KEYS, call, steps_of

pytestmark = pytest.mark.slow

LEN = "    def __len__(self):\n        return len(self._data)\n"
KEYS = [call("edit", path="kvstore/store.py", old=LEN,
             new=LEN + "\n    def keys(self):\n        return sorted(self._data)\n")]
DEFAULTS = [
    call("edit", path="kvstore/store.py",
         old="    def __init__(self):\n        self._data = {}\n",
         new="    def __init__(self, defaults=None):\n        self._data = {}\n"
             "        self._defaults = dict(defaults or {})\n"),
    call("edit", path="kvstore/store.py",
         old="        return self._data.get(key, default)\n",
         new="        if key in self._data:\n            return self._data[key]\n"
             "        return self._defaults.get(key) if default is None else default\n"),
]


def _script(payload: dict[str, Any]) -> Reply:
    """Implements what the task text asks: Store.keys(), defaults, or both (solo)."""
    task = next(m["content"] for m in payload["messages"] if m["role"] == "user")
    task = task if isinstance(task, str) else str(task)
    plan = (KEYS if "keys()" in task else []) + (DEFAULTS if "defaults=" in task else [])
    step = steps_of(payload)
    return plan[step] if step < len(plan) else call("finish", summary="done")


@pytest.fixture
def model_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in NO_KEYS:
        monkeypatch.delenv(name, raising=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ScriptedModelServer()
    server.script("m", _script)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server.base_url
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_builtin_agents_solve_a_pair_through_the_sdk(model_url: str, tmp_path: Path) -> None:
    """Solo and coop builtin agents edit their scopes from model tool calls; their
    patches are graded like any other, and their tokens are counted per pair."""
    spec = RunSpec(out=tmp_path, task="kvstore", pairs="3-4", settings=("solo", "coop"),
                   agent="builtin", options=AgentOptions(model="openai/m", base_url=model_url),
                   workers=1)
    results = {r.setting: r for r in run(spec)["results"]}
    assert results["solo"].status == "passed", results["solo"].reason
    assert results["coop"].status == "passed", results["coop"].reason
    assert results["coop"].merge_status == "clean"
    assert results["solo"].prompt_tokens > 0 and results["coop"].steps >= 4


def test_agents_load_by_name_entry_point_or_path() -> None:
    """oracle, the corral.agents entry points (the same agents `corral run --agent`
    takes), and module:attr all give an agent; an unknown name is a LookupError naming
    the choices; a named model agent needs a model."""
    from agents import miniswe
    from agents.entry import builtin

    assert load_agent("oracle", AgentOptions()).oracle
    with_model = AgentOptions(model="openai/m")
    assert {e.name for e in entry_points(group="corral.agents")} >= {"builtin", "mini-swe-agent"}
    mini = load_agent("mini-swe-agent", with_model)
    assert mini.agent is miniswe.run and mini.name == "mini-swe-agent" and not mini.builtin
    by_path = load_agent("agents.entry:builtin", with_model)
    assert by_path.agent is builtin and by_path.builtin and not by_path.oracle
    plugin = load_agent("tests.bench.test_cooperbench_team:chatty", AgentOptions())
    assert plugin.name == "chatty" and plugin.provider() is None
    with pytest.raises(LookupError, match=r"corral\.agents"):
        load_agent("no-such-agent", AgentOptions())
    with pytest.raises(ValueError, match="--model"):
        load_agent("builtin", AgentOptions())
