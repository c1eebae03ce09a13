"""A coordinator killed with SIGKILL keeps its team's state: the task list, the
scratchpad and the requests are derived again from the members' branches."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coordinator import Coordinator
from tests.conftest import make_repo

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]  # slow: SIGKILLed children

WORKER = textwrap.dedent(
    """
    import asyncio, dataclasses, json, sys
    from coordinator import Coordinator

    def emit(kind, value):
        print(json.dumps([kind, value]), flush=True)

    async def main(state, repo, rounds):
        async with Coordinator.open(state, repo, backend="copy") as coord:
            names = ["lead", "a", "b", "c"]
            scopes = [await coord.root.fork(n) for n in names]
            team = await coord.create_team("dev", scopes, lead=scopes[0])
            lead = team.member("lead")
            for i in range(rounds):
                task = (await lead.add(f"task {i}")).task
                got = await asyncio.gather(*(team.member(n).claim(task.id) for n in names))
                owner = next(n for n, r in zip(names, got) if r.won)
                emit("claimed", [task.id, owner])
                me = team.member(owner)
                await me.write(f"tasks/{task.id}.md", f"{owner} did {task.id}".encode())
                emit("wrote", [task.id, owner])
                if i % 3 == 0:
                    to = "lead" if owner != "lead" else "a"
                    await me.request(to, "review", f"check {task.id}")
                await me.complete(task.id, "ok")
                emit("done", [task.id, owner])
            if rounds < 1000:  # a quiet end: the whole state, then wait to be killed
                emit("state", {
                    "tasks": [dataclasses.asdict(t) for t in await team.tasks()],
                    "files": [dataclasses.asdict(f) for f in await team.files()],
                    "requests": [dataclasses.asdict(r) for r in await team.requests()],
                })
                await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


def _run(state: Path, repo: Path, rounds: int, stop_after: int | None) -> list[list]:
    """Run the worker, SIGKILL it after `stop_after` lines (or after its state line)."""
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(state), str(repo), str(rounds)],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    lines: list[list] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(json.loads(line))
        if (stop_after is not None and len(lines) >= stop_after) or lines[-1][0] == "state":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines += [json.loads(x) for x in proc.stdout.read().splitlines() if x.strip()]
    return lines


async def test_sigkill_mid_work_keeps_every_acknowledged_team_operation(tmp_path: Path):
    """Killed while members race for tasks and write: every acknowledged claim, write and
    completion is in the state derived at the reopen, and the team goes on from it."""
    repo = make_repo(tmp_path / "repo", {"README.md": "# team\n"})
    acked = _run(tmp_path / "s", repo, 1000, stop_after=40)
    async with Coordinator.open(tmp_path / "s") as coord:
        team = coord.team("dev")
        tasks = {t.id: t for t in await team.tasks()}
        files = {f.path: f for f in await team.files()}
        for kind, (task, owner) in acked:
            assert tasks[task].owner == owner
            if kind == "wrote":
                assert await team.read(f"tasks/{task}.md") == f"{owner} did {task}".encode()
                assert files[f"tasks/{task}.md"].member == owner
            if kind == "done":
                assert tasks[task].status == "done"
        new = (await team.member("lead").add("after the crash")).task
        assert new is not None and new.id not in {t for _, (t, _) in acked}
        assert (await team.member("a").claim(new.id)).won


async def test_sigkill_at_rest_reopens_the_same_team_state(tmp_path: Path):
    """Killed at rest (nothing checkpointed at a close): the reopened state's tasks, files
    and requests are exactly the ones the killed coordinator held."""
    repo = make_repo(tmp_path / "repo", {"README.md": "# team\n"})
    lines = _run(tmp_path / "s", repo, 7, stop_after=None)
    kind, held = lines[-1]
    assert kind == "state" and len(held["tasks"]) == 7
    async with Coordinator.open(tmp_path / "s") as coord:
        import dataclasses

        team = coord.team("dev")
        again = {
            "tasks": [dataclasses.asdict(t) for t in await team.tasks()],
            "files": [dataclasses.asdict(f) for f in await team.files()],
            "requests": [dataclasses.asdict(r) for r in await team.requests()],
        }
    assert again == held
