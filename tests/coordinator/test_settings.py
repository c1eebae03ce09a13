"""A state's settings are one recorded value: written to its trace (readable with stock git),
enforced by every entrance that opens it, and changed only explicitly, with a record."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator import Coordinator, Settings, StateError
from sandboxes import Limits
from tests.agents._helpers import call, steps_of
from tests.conftest import make_repo

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("no_keys")]

SITE_POLICY = '''
from coordinator import block


async def no_secrets(intent, view):
    """A site rule: nothing is written under secret/."""
    if getattr(intent, "path", "").startswith("secret/"):
        return block("no secrets in this repository")
    return None
'''
GUARDED = Settings(policies=("conflict-guard", "sitepol:no_secrets"), gate=("exec",),
                   exec_limits=Limits(memory=512 * 1024 * 1024), defer_timeout=30.0)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A policy module `sitepol` importable here and by the subprocesses (their env)."""
    where = tmp_path / "site"
    where.mkdir()
    (where / "sitepol.py").write_text(SITE_POLICY)
    monkeypatch.syspath_prepend(str(where))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), os.getcwd()])}


def git(state: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(state / "trace.git"), *args], check=True,
                          capture_output=True, text=True).stdout


def corral() -> str:
    found = shutil.which("corral", path=str(Path(sys.executable).parent))
    assert found
    return found


async def test_settings_are_recorded_and_enforced_when_reopened(
        tmp_path: Path, sample_repo: Path, site: dict[str, str]) -> None:
    """Settings given at first open are a commit on refs/corral/settings that stock git
    shows; reopening without any enforces them: the site policy blocks, and a gate rule
    nobody can answer in process blocks instead of waving the intent through."""
    state = tmp_path / "s"
    async with Coordinator.open(state, sample_repo, settings=GUARDED) as coord:
        assert coord.settings == GUARDED and coord.settings.exec_limits.memory == 512 * 1024 * 1024
    assert Settings.model_validate_json(git(state, "show", "refs/corral/settings:settings.json")
                                        ) == GUARDED
    assert git(state, "log", "--format=%s", "refs/corral/settings").splitlines() == [
        "corral settings: recorded at first open (policies: conflict-guard, "
        "sitepol:no_secrets; gate: exec)"]

    async with Coordinator.open(state) as coord:
        assert coord.settings == GUARDED and coord.settings.defer_timeout == 30.0
        b = await coord.root.fork("b")
        r = await b.write("secret/key", b"hunter2\n")
        assert r.blocked and r.effect.decision is not None
        assert r.effect.decision.policy == "no_secrets"
        assert "no secrets in this repository" in r.reason
        x = await b.exec(["true"])
        assert x.blocked and "held at the gate (exec)" in x.reason
        assert "nobody can answer" in x.reason
        assert (await b.write("docs/ok.md", b"fine\n")).ok


async def test_a_change_is_refused_unless_explicit_and_then_recorded(
        tmp_path: Path, sample_repo: Path, site: dict[str, str]) -> None:
    """Other settings on a recorded state raise StateError naming the difference; with
    change_settings they are recorded as a second commit saying what changed."""
    state = tmp_path / "s"
    async with Coordinator.open(state, sample_repo, settings=GUARDED):
        pass
    looser = Settings(policies=("conflict-guard",))
    with pytest.raises(StateError) as e:
        async with Coordinator.open(state, settings=looser):
            pass
    assert "policies: [conflict-guard, sitepol:no_secrets] -> [conflict-guard]" in str(e.value)
    assert "--change-settings" in str(e.value)
    async with Coordinator.open(state, settings=looser, change_settings=True) as coord:
        b = await coord.root.fork("b")
        assert (await b.write("secret/key", b"now allowed\n")).ok
    subjects = git(state, "log", "--format=%s", "refs/corral/settings").splitlines()
    assert len(subjects) == 2 and subjects[0].startswith("corral settings: changed: ")
    assert "policies: [conflict-guard, sitepol:no_secrets] -> [conflict-guard]" in subjects[0]
    async with Coordinator.open(state) as coord:
        assert coord.settings == looser


async def _serve(state: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([corral(), "serve", "--state", str(state), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "CORRAL_ADMIN_TOKEN": "a.settings-test"})
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    assert line.startswith("listening on "), (line, proc.stderr.read() if proc.stderr else "")
    await asyncio.sleep(1.0)  # its signal handlers go in just after that line
    return proc


@pytest.mark.slow
async def test_a_served_state_keeps_its_policies_under_mcp_state(
        tmp_path: Path, sample_repo: Path, site: dict[str, str]) -> None:
    """`corral serve --policy --gate` records its settings; `corral mcp --state` on the same
    state (the real MCP client over stdio) refuses what they refuse; `corral serve` with
    other options is refused until --change-settings; `corral trace settings` shows them."""
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    state = tmp_path / "s"
    proc = await _serve(state, site, "--repo", str(sample_repo), "--policy",
                        "sitepol:no_secrets", "--gate", "fs.write:held/*")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0

    params = StdioServerParameters(command=corral(),
                                   args=["mcp", "--scope", "bob", "--state", str(state)],
                                   env=site)
    async with Client(params) as client:
        refused = await client.call_tool("write_file", {"path": "secret/key", "content": "x"})
        text = "\n".join(getattr(c, "text", "") for c in refused.content)
        assert refused.is_error, f"a write the served policy forbids was allowed: {text}"
        assert "no secrets in this repository" in text
        held = await client.call_tool("write_file", {"path": "held/n.md", "content": "x"})
        assert held.is_error and "held at the gate" in "\n".join(
            getattr(c, "text", "") for c in held.content)
        assert not (await client.call_tool("write_file", {"path": "ok.md", "content": "x"})
                    ).is_error
    async with Coordinator.open(state) as coord:
        statuses = {e.intent.path: e.status for e in coord.log("bob")  # type: ignore[union-attr]
                    if e.kind == "fs.write"}
    assert statuses == {"secret/key": "blocked", "held/n.md": "blocked", "ok.md": "materialized"}

    other = subprocess.run([corral(), "serve", "--state", str(state), "--port", "0",
                            "--no-guard"], capture_output=True, text=True, env=site, timeout=60)
    assert other.returncode == 1 and "records other settings" in other.stderr
    assert "--change-settings" in other.stderr
    shown = subprocess.run([corral(), "trace", "settings", "-s", str(state)], check=True,
                           capture_output=True, text=True, env=site).stdout
    assert json.loads(shown)["policies"] == ["conflict-guard", "sitepol:no_secrets"]
    assert json.loads(shown)["gate"] == ["fs.write:held/*"]
    proc = await _serve(state, site, "--no-guard", "--change-settings")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    history = subprocess.run([corral(), "trace", "settings", "-s", str(state), "--history"],
                             check=True, capture_output=True, text=True, env=site).stdout
    assert len(history.splitlines()) == 2 and "changed: policies" in history


def _secret_writer(payload: dict[str, object]) -> object:
    step = steps_of(payload)
    if step == 0:
        return call("write_file", path="secret/key", content="hunter2\n")
    return call("finish", summary="done")


def test_run_takes_a_module_attr_supervisor_and_keeps_a_states_settings(
        tmp_path: Path, site: dict[str, str], served: Callable[..., str]
) -> None:
    """`corral run --supervisor sitepol:no_secrets` runs under that policy (one loader for
    every entrance); `corral run --state` on a state that records it enforces it whatever
    --supervisor says."""
    from typer.testing import CliRunner

    from coordinator.cli import app

    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    url = served({"m": _secret_writer})

    def run(state: Path, supervisor: str) -> dict[str, object]:
        result = CliRunner().invoke(app, [
            "run", "--repo", str(repo), "--task", "add a key", "--model", "openai/m",
            "--base-url", url, "--supervisor", supervisor, "--state", str(state), "--json"])
        assert "unknown supervisor" not in result.output
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    report = run(tmp_path / "s1", "sitepol:no_secrets")
    assert report["agents"][0]["blocked"] == 1  # type: ignore[index]

    async def record() -> None:
        async with Coordinator.open(tmp_path / "s2", repo,
                                    settings=Settings(policies=("sitepol:no_secrets",))):
            pass

    asyncio.run(record())
    report = run(tmp_path / "s2", "none")
    assert report["agents"][0]["blocked"] == 1  # type: ignore[index]
