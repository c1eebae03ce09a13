"""`corral demo`: the main job, offline, in seconds.

A bundled repository (a tiny calculator with unit tests), two scripted agents
in forked scopes under the conflict guard. Alice adds `multiply` at the end of
calc.py; Bob's attempt to add `power` at the same place is blocked with the
lines' provenance; Bob puts it in its own module instead, then breaks a test
with a command, and the supervisor rewinds him one step. Both branches merge
into root, the tests pass in root, and the trace graph is printed.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from coordinator import ConflictGuard, Coordinator, Event, ExecOutcome, Result, StateError

from .scripted_agent import Run, ScriptedAgent, Write

__all__ = ["DEMO_FILES", "DemoReport", "make_demo_repo", "run_demo"]

CALC = '''"""A tiny calculator."""


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b
'''

TESTS = '''import unittest

import calc


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_subtract(self):
        self.assertEqual(calc.subtract(5, 3), 2)


if __name__ == "__main__":
    unittest.main()
'''

DEMO_FILES = {
    "calc.py": CALC,
    "test_calc.py": TESTS,
    "README.md": "# calc\n\nA tiny calculator, the Corral demo's repository.\n",
    ".gitignore": "__pycache__/\n*.pyc\n",
}


def make_demo_repo(path: Path) -> Path:
    """Create the bundled repository (one commit) at `path`."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in DEMO_FILES.items():
        (path / name).write_text(text)
    env = {"GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@corral",
           "GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@corral",
           "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "calc"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, env=env)
    return path


@dataclass
class DemoReport:
    state: str
    backend: str = ""
    blocked: list[str] = field(default_factory=list)
    rewound: str = ""
    merged: list[str] = field(default_factory=list)
    tests_passed: bool = False
    effects: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _describe(event: Event) -> str:
    e = event.effect
    colour = {"materialized": "green", "blocked": "red", "failed": "yellow"}.get(e.status, "")
    text = f"[bold]{e.scope:>5}[/] {escape(e.summary())}"
    if isinstance(e.outcome, ExecOutcome):
        text += f" → exit {e.outcome.returncode}"
    if e.status == "blocked" and e.decision is not None:
        text += f"\n        [red]reason: {escape(e.decision.reason)}[/]"
    return f"[{colour}]{text}[/]" if colour else text


def graph_command(trace: Path) -> list[str]:
    """`git log --graph` of every branch of the trace at `trace`, each labelled with
    its ref (scopes, rewound and discarded branches, the snapshot)."""
    return ["git", "--git-dir", str(trace), "log", "--graph", "--oneline", "--decorate=short",
            "--decorate-refs=refs/corral/scopes/", "--decorate-refs=refs/corral/archive/",
            "--decorate-refs=refs/corral/snapshot", "--glob=refs/corral/*"]


async def run_demo(
    console: Console, state: Path | None = None, backend: str | None = None
) -> DemoReport:
    """Run the demo; returns its report (also printed as it goes)."""
    with tempfile.TemporaryDirectory(prefix="corral-demo-") as tmp:
        if state is not None:
            _fresh_demo_state(state)
        return await _run_demo(console, Path(tmp), state, backend)


DEMO_MARK = "corral-demo"
"""A file the demo leaves in its --state directory: what it may clear on the next run."""


def _fresh_demo_state(state: Path) -> None:
    """Make `state` ready for a new demo run: clear an earlier demo's state there
    (recognised by its mark), refuse a directory holding anything else."""
    if state.exists() and any(state.iterdir()):
        if not (state / DEMO_MARK).exists():
            raise StateError(f"{state} is not empty and not an earlier demo's state: "
                             "give --state a new or empty directory")
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    (state / DEMO_MARK).write_text("written by `corral demo`; the next demo run clears this "
                                   "directory\n")


async def _run_demo(
    console: Console, tmp: Path, state: Path | None, backend: str | None
) -> DemoReport:
    started = time.perf_counter()
    kept = state is not None
    state = state or tmp / "state"
    repo = make_demo_repo(tmp / "calc")
    report = DemoReport(state=str(state) if kept else "")
    guard = ConflictGuard()
    py = "python3"  # the system's: a command sees no venv unless declared (coord.toolchain)
    async with Coordinator.open(state, repo, backend=backend, policies=[guard]) as coord:
        report.backend = coord.backend.name
        where = f"state {state}" if kept else "a temporary state (--state DIR keeps it)"
        console.print(f"[bold]Corral demo[/] — {where}, sandbox [cyan]{coord.backend.name}[/]\n")
        sub = coord.events.subscribe(types=["effect"])

        def show(note: str = "") -> None:
            """Print the effects recorded so far, then a line of narration."""
            for event in sub.drain():
                report.effects += 1
                console.print("  " + _describe(event))
            if note:
                console.print(f"\n{note}")

        alice = await coord.root.fork("alice")
        bob = await coord.root.fork("bob")

        multiply = CALC + "\n\ndef multiply(a, b):\n    return a * b\n"
        power_in_calc = CALC + "\n\ndef power(a, b):\n    return a ** b\n"
        show("[bold]alice[/] adds multiply() at the end of calc.py")
        await ScriptedAgent([Write("calc.py", multiply.encode())]).run(alice)
        show("[bold]bob[/] tries to add power() at the same place; the conflict guard answers")
        [r] = await ScriptedAgent([Write("calc.py", power_in_calc.encode())]).run(bob)
        if r.blocked:
            report.blocked.append(r.reason)
        show("[bold]bob[/] adapts: power() goes into its own module; then he edits a test")
        bad_test = "sed -i 's/assertEqual(calc.add(2, 3), 5)/assertEqual(calc.add(2, 3), 6)/'"
        results = await ScriptedAgent([
            Write("powers.py", b"def power(a, b):\n    return a ** b\n"),
            Run(("sh", "-c", f"{bad_test} test_calc.py")),
            Run((py, "-m", "unittest", "-q", "test_calc")),
        ]).run(bob)
        tests = results[-1]
        assert isinstance(tests.outcome, ExecOutcome)
        if tests.outcome.returncode != 0:
            show("[bold]supervisor[/]: bob's tests fail after his last command; "
                 "rewinding bob 2 steps (the test run and the bad edit)")
            rewind = await bob.rewind(steps=2)
            report.rewound = rewind.commit or ""
        show("[bold]supervisor[/]: merging alice and bob into root, then running the tests")
        for scope in (alice, bob):
            m = await coord.root.merge(scope)
            if m.clean:
                report.merged.append(scope.name)
            else:
                for c in m.conflicts:
                    console.print(f"  [red]conflict[/] {c.path}: ours by {c.ours_commit}, "
                                  f"theirs by {c.theirs_commit}")
        final: Result = await coord.root.exec([py, "-m", "unittest", "-q", "test_calc"])
        assert isinstance(final.outcome, ExecOutcome)
        report.tests_passed = final.outcome.returncode == 0
        show()
        sub.close()
        console.print(f"\nroot's tests: {'[green]pass' if report.tests_passed else '[red]FAIL'}[/]")
        await coord.checkpoint()  # plain git reads the repository on disk
        argv = graph_command(coord.trace.path)
        graph = subprocess.run(argv, capture_output=True, text=True).stdout
        if kept:
            console.print(f"\n[bold]The trace[/] ({escape(shlex.join(argv))}):",
                          soft_wrap=True)
        else:
            # The temporary state goes when the demo ends: no command to read it later.
            console.print("\n[bold]The trace[/] (in a temporary state removed when the demo "
                          "ends; --state DIR keeps it for git and `corral trace`):")
        console.print(graph, markup=False, highlight=False)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
