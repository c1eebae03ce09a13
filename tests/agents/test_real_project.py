"""A new user's first runs, on a real third-party project (itsdangerous, its released sdist
downloaded at test time and git-initialised): `corral run` as a real subprocess, the
scripted model server through the real OpenAI SDK, the project's environment set up by
Corral, the project's own test suite run by the agents inside their scopes.

The environment is built once per test session (a session cache directory shared by these
tests, `CORRAL_ENV_CACHE`); after that each test takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply
from tests.agents._helpers import NO_KEYS, call, steps_of
from tests.conftest import git
from tests.real_project import real_project

pytestmark = [pytest.mark.root, pytest.mark.slow]  # commands run in bubblewrap


PYTEST = "python -m pytest -q -p no:cacheprovider"
ENCODING = "src/itsdangerous/encoding.py"
DOC = ('    """Base64 encode a string of bytes or text. The resulting bytes are\n'
       '    safe to use in URLs.\n    """\n')
"""Lines of encoding.py both agents are scripted to change: agent-2 collides with agent-1."""
EXC = "src/itsdangerous/exc.py"
EXC_DOC = '    """Raised if bad data of any sort was encountered. This is the base\n'


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """itsdangerous as a git repository, downloaded once per session (a test clones it)."""
    return real_project(tmp_path_factory.mktemp("itsdangerous"))


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The environment cache these tests share: the first run builds, the others unpack."""
    return tmp_path_factory.mktemp("envs")


def _clone(project: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(project), str(where)], check=True)
    return where


def _corral(env_cache: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_KEYS}
    env |= {"COLUMNS": "300", "OPENAI_API_KEY": "test", "CORRAL_ENV_CACHE": str(env_cache)}
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def _effects(state: Path, scope: str) -> list[dict[str, Any]]:
    """The effect records of `scope`'s branch in the trace, oldest first (stock git: each
    commit's message is a summary line, then the record as JSON)."""
    out = subprocess.run(["git", "--git-dir", str(state / "trace.git"), "log", "--reverse",
                          "--first-parent", "--format=%B%x00", f"refs/corral/scopes/{scope}"],
                         check=True, capture_output=True, text=True).stdout
    records = []
    for message in out.split("\0"):
        _, _, body = message.strip().partition("\n\n")
        if body.startswith("{"):
            records.append(json.loads(body))
    return records


def _blob(state: Path, blob: str) -> str:
    return subprocess.run(["git", "--git-dir", str(state / "trace.git"), "cat-file", "blob",
                           blob], check=True, capture_output=True, text=True).stdout


def _pytest_runs(state: Path, scope: str) -> list[tuple[int, str]]:
    """(return code, output) of each `python -m pytest` the scope ran, from the trace."""
    runs = []
    for e in _effects(state, scope):
        intent, outcome = e.get("intent", {}), e.get("outcome") or {}
        if intent.get("kind") == "exec" and "pytest" in " ".join(intent.get("argv", [])):
            assert outcome.get("kind") == "exec", e
            runs.append((outcome["returncode"],
                         _blob(state, outcome["stdout"]) + _blob(state, outcome["stderr"])))
    return runs


def _tree(repo: Path) -> dict[str, float]:
    """Every path under the repository's working tree (.git aside) and its mtime."""
    return {str(p.relative_to(repo)): p.lstat().st_mtime for p in repo.rglob("*")
            if ".git" not in p.relative_to(repo).parts}


def test_two_agents_run_the_projects_tests_collide_once_and_leave_three_commits(
        tmp_path: Path, project: Path, env_cache: Path,
        served: Callable[[dict[str, Any]], str]) -> None:
    """Two agents through `corral run` on a real project: Corral sets up its environment,
    each agent's `python -m pytest` passes inside its scope (the exec outcomes in the
    trace say so), the conflict guard blocks agent-2's write to the lines agent-1 already
    changed (in the trace, in the report and on the terminal) and agent-2 adapts; the
    branch holds exactly one commit per agent over HEAD plus their merge; the user's
    working tree, HEAD and ignored files are untouched."""
    repo = _clone(project, tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD").strip()
    before = _tree(repo)
    one_wrote = threading.Event()
    waited = [0]

    def agent1(payload: dict[str, Any]) -> Reply:
        step = steps_of(payload)
        if step == 1:
            one_wrote.set()  # this request carries the result of its edit
        plan = [call("edit", path=ENCODING, old=DOC,
                     new='    """Base64-encode bytes or text; the result is URL-safe.\n    """\n'),
                call("run", command=PYTEST, timeout=300),
                call("finish", summary="shorter docstring, tests pass")]
        return plan[min(step, len(plan) - 1)]

    def agent2(payload: dict[str, Any]) -> Reply:
        if not one_wrote.is_set() and waited[0] == steps_of(payload):
            waited[0] += 1  # a cheap step until agent-1's change is its head: then collide
            return call("run", command="sleep 0.2")
        plan = [call("edit", path=ENCODING, old=DOC,
                     new='    """Encode with URL-safe base64, without padding.\n    """\n'),
                call("edit", path=EXC, old=EXC_DOC,
                     new='    """Raised if bad data of any sort was found. This is the base\n'),
                call("run", command=PYTEST, timeout=300),
                call("finish", summary="exc docstring, tests pass")]
        step = steps_of(payload) - waited[0]
        return plan[min(step, len(plan) - 1)]

    url = served({"a1": agent1, "a2": agent2})
    done = _corral(env_cache, "run", "--repo", str(repo), "--task", "tidy base64_encode's doc",
                   "--task", "tidy the docs", "--model", "openai/a1", "--model", "openai/a2",
                   "--base-url", url, "--supervisor", "conflict-guard", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    state = Path(report["state"])
    assert report["ok"] and report["status"] == "finished", report
    assert report["environment"]["recipe"] == "python", report["environment"]

    for name in ("agent-1", "agent-2"):
        runs = _pytest_runs(state, name)
        assert runs, f"{name} ran no tests"
        code, out = runs[-1]
        assert code == 0 and " passed" in out and "failed" not in out, out[-1500:]

    blocked = [e for e in _effects(state, "agent-2") if e["status"] == "blocked"]
    assert len(blocked) == 1, blocked
    decision = blocked[0]["decision"]
    assert decision["policy"] == "conflict-guard" and "agent-1" in decision["reason"]
    assert blocked[0]["intent"]["path"] == ENCODING
    agents = {a["name"]: a for a in report["agents"]}
    assert agents["agent-2"]["blocked"] == 1 and agents["agent-1"]["blocked"] == 0
    assert "agent-2: blocked" in done.stderr

    branch = report["branch"]
    assert [m["outcome"] for m in report["merges"]] == ["merged", "merged"]
    assert git(repo, "rev-list", "--count", f"{head}..{branch}").strip() == "3"
    _merge, *parents = git(repo, "rev-list", "--parents", "-1", branch).split()
    assert len(parents) == 2
    for parent in parents:
        assert git(repo, "rev-list", "--parents", "-1", parent).split()[1:] == [head]
    changed = git(repo, "diff", "--name-only", head, branch).split()
    assert sorted(changed) == [ENCODING, EXC]  # no venv, cache or bytecode came along
    assert "URL-safe.\n" in git(repo, "show", f"{branch}:{ENCODING}")

    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert _tree(repo) == before


def test_mini_swe_agent_runs_the_projects_tests_and_its_change_lands(
        tmp_path: Path, project: Path, env_cache: Path,
        served: Callable[[dict[str, Any]], str]) -> None:
    """`corral run --agent mini-swe-agent` on the real project: its bash actions see the
    environment Corral set up (its `python -m pytest` passes in its scope, in the trace),
    and its change is the branch's one commit; the working tree is untouched."""
    pytest.importorskip("minisweagent")
    repo = _clone(project, tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD").strip()
    sed = "sed -i 's/This is the base$/It is the base/' " + EXC

    def mini(payload: dict[str, Any]) -> Reply:
        plan = [call("bash", command=sed),
                call("bash", command=PYTEST),
                call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
        return plan[min(steps_of(payload), len(plan) - 1)]

    url = served({"m": mini})
    done = _corral(env_cache, "run", "--repo", str(repo), "--task", "tidy exc's docstring",
                   "--agent", "mini-swe-agent", "--model", "openai/m", "--base-url", url,
                   "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"], report
    [agent] = report["agents"]
    assert agent["status"] == "finished", agent
    runs = _pytest_runs(Path(report["state"]), "agent-1")
    assert runs, "mini-swe-agent ran no tests"
    code, out = runs[-1]
    assert code == 0 and " passed" in out and "No module named" not in out, out[-1500:]
    branch = report["branch"]
    assert git(repo, "rev-list", "--count", f"{head}..{branch}").strip() == "1"
    assert git(repo, "diff", "--name-only", head, branch).split() == [EXC]
    assert "It is the base" in git(repo, "show", f"{branch}:{EXC}")
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "status", "--porcelain", "--ignored") == ""
