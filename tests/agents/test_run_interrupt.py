"""`corral run` interrupted and resumed: a real subprocess, a real SIGINT, the scripted model
server through the real SDK, a real git repository."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.model_server import Reply
from tests.agents._helpers import CALC, NO_KEYS, call, steps_of
from tests.conftest import git, make_repo

WAIT = 120.0  # seconds at most for any line or event: a hung run fails, it does not hang


class _Lines:
    """The lines a subprocess prints (stdout and stderr together), read in a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout

        def read() -> None:
            for line in out:
                self._q.put(line)
            self._q.put(None)

        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, pattern: str) -> re.Match[str]:
        while True:
            line = self._q.get(timeout=WAIT)
            assert line is not None, "the run ended without printing " + pattern + (
                "\n" + "".join(self.seen))
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def rest(self) -> str:
        while (line := self._q.get(timeout=WAIT)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def _corral(*args: str) -> list[str]:
    return [sys.executable, "-m", "coordinator.cli", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_KEYS}
    return env | {"COLUMNS": "300", "OPENAI_API_KEY": "test"}


@pytest.mark.slow  # a real corral run process, SIGINT, then --resume: ~7 s
def test_sigint_stops_at_the_next_step_and_resume_finishes_the_run(
    tmp_path: Path, served: Callable[[dict[str, Any]], str]
) -> None:
    """SIGINT while agent-1's second model call is in flight: the run says so, lets that
    step finish, stops both agents at their next step, leaves a partial branch holding the
    work so far, prints the trace and `corral run --resume ID`, and exits 130. The resume
    continues each agent from its last effect (conversation rebuilt from the trace): every
    effect before the interrupt is in the trace once, both agents finish, and the branch
    holds all their work."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC})
    reached, release = threading.Event(), threading.Event()
    plan1 = [call("write_file", path="a.py", content="a = 1\n"),
             call("write_file", path="b.py", content="b = 2\n"),
             call("write_file", path="c.py", content="c = 3\n"),
             call("finish", summary="a, b and c")]

    def agent1(payload: dict[str, Any]) -> Reply:
        step = steps_of(payload)
        if step == 1 and not reached.is_set():
            reached.set()  # the slow step: held until the run has seen the interrupt
            assert release.wait(WAIT)
        return plan1[step]

    def agent2(payload: dict[str, Any]) -> Reply:
        plan = [call("write_file", path="d.py", content="d = 4\n"),
                call("finish", summary="d")]
        return plan[steps_of(payload)]

    url = served({"a1": agent1, "a2": agent2})
    args = ["run", "--repo", str(repo), "--task", "write a, b, c", "--task", "write d",
            "--model", "openai/a1", "--model", "openai/a2", "--base-url", url,
            "--supervisor", "none"]
    proc = subprocess.Popen(_corral(*args), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        lines = _Lines(proc)
        run_id = lines.wait_for(r"corral run (\S+): trace in")[1]
        assert reached.wait(WAIT), "agent-1 never reached its second step"
        proc.send_signal(signal.SIGINT)
        lines.wait_for(r"interrupted: the agents stop at their next step")
        release.set()
        output = lines.rest()
        assert proc.wait(WAIT) == 130, output
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert f"resume: corral run --resume {run_id} --repo {repo}" in output, output
    state = repo / ".git" / "corral" / "runs" / run_id
    assert str(state) in output
    branch = f"corral/{run_id}"
    # the step in flight finished (b.py), the next one (c.py) never started
    assert git(repo, "show", f"{branch}:a.py") == "a = 1\n"
    assert git(repo, "show", f"{branch}:b.py") == "b = 2\n"
    assert "c.py" not in git(repo, "ls-tree", "--name-only", branch).split()
    assert git(repo, "show", f"{branch}:d.py") == "d = 4\n"
    assert "partial" in git(repo, "log", "-1", "--format=%B", branch)
    before = _subjects(state, "agent-1")
    assert before.count("model.call openai/a1") == 2

    resumed = subprocess.run(_corral("run", "--resume", run_id, "--repo", str(repo)),
                             capture_output=True, text=True, env=_env(), timeout=WAIT)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = _subjects(state, "agent-1")
    assert after[:len(before)] == before  # the effects before the interrupt, kept as they were
    for path in ("a.py", "b.py", "c.py"):
        assert after.count(f"fs.write {path}") == 1
    assert after.count("model.call openai/a1") == 4  # no step done twice
    assert _subjects(state, "agent-2").count("fs.write d.py") == 1
    files = git(repo, "ls-tree", "--name-only", branch).split()
    assert {"a.py", "b.py", "c.py", "d.py", "calc.py"} <= set(files)
    assert "partial" not in git(repo, "log", "-1", "--format=%B", branch)


def _subjects(state: Path, scope: str) -> list[str]:
    """The scope's effects in the trace, oldest first (one commit subject each)."""
    log = git(state, "--git-dir", str(state / "trace.git"), "log", "--reverse",
              "--first-parent", "--format=%s", f"refs/corral/scopes/{scope}")
    return log.splitlines()
