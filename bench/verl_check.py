"""verl's own type against our export: every verl record of a rollout tree built into
verl's `AgentLoopOutput` by verl itself.

verl needs torch, ray and more (a venv of several GB), so the suite checks the verl
records against verl's documented field list only (tests/agents/test_rollouts_export.py);
this check runs the real class, in the interpreter `--python` (default
$CORRAL_VERL_PYTHON, else this one) names. It grows a tree here: a one-agent run against
the local scripted model server (token ids and logprobs asked for), forked before every
model call, K siblings each whose seed picks the answer, graded by a test command;
exports it as verl JSON lines; then, in verl's interpreter, builds an `AgentLoopOutput`
from each record and checks that verl kept the ids, mask, logprobs and reward as given,
and which of the record's keys verl declares.

    corral bench verl [--python PATH] [-k 4] [-o FILE]

Exit status 2 when verl does not import in that interpreter (nothing was checked).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["VerlMissing", "grow_and_export", "render", "run", "validate"]

_VALIDATE = r"""
import json, sys
import verl
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
fields = sorted(AgentLoopOutput.model_fields)
required = sorted(n for n, f in AgentLoopOutput.model_fields.items() if f.is_required())
n, keys = 0, set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    o = AgentLoopOutput(**r)
    assert o.prompt_ids == r["prompt_ids"] and o.response_ids == r["response_ids"]
    assert o.response_mask == r["response_mask"]
    assert o.response_logprobs == r["response_logprobs"]
    assert o.reward_score == r["reward_score"] and o.num_turns == r["num_turns"]
    assert len(o.response_ids) == len(o.response_mask) == len(o.response_logprobs)
    n += 1
    keys |= set(r)
print(json.dumps({"verl_version": verl.__version__, "validated": n, "fields": fields,
                  "required": required, "undeclared": sorted(keys - set(fields))}))
"""


class VerlMissing(RuntimeError):
    """verl does not import in the interpreter given."""


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("verl check\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, env=env)
    return path


async def grow_and_export(work: Path, k: int) -> tuple[Path, int]:
    """A tree of `k` siblings per fork point grown from a scripted run in `work`, its verl
    records written to `work/verl.jsonl`; (that path, the tree's leaves)."""
    from agents.model_server import Reply, ScriptedCall, ScriptedModelServer
    from agents.rollouts import export_tree, fork_points, grow, siblings
    from agents.run import run_tasks
    from coordinator import Coordinator

    def model(payload: dict[str, Any]) -> Reply:  # the seed picks the answer
        if any(m["role"] == "tool" for m in payload["messages"]):
            return Reply("done")
        answer = str((payload.get("seed") or 0) % 2)
        return Reply(tool_calls=[ScriptedCall("write_file", {"path": "answer.txt",
                                                             "content": answer + "\n"})])

    state = work / "state"
    async with ScriptedModelServer() as server:
        server.script("m", model)
        await run_tasks(_repo(work / "repo"), ["write the answer"], model="openai/m",
                        base_url=server.base_url, state=state, supervisor="none", tokens=True)
        async with Coordinator.open(state) as coord:
            heads = {"agent-1": coord.scope("agent-1").head}
            points = await coord.io(lambda: fork_points(coord.trace, heads, every=1))
            tree = await grow(coord, ["agent-1"], points, siblings(k),
                              base_url=server.base_url, test="grep -qx 1 answer.txt")
            path = work / "verl.jsonl"
            done = await coord.io(export_tree, coord.trace, tree.id, "verl", path)
    if done.skipped:
        raise RuntimeError(f"{done.skipped} trajectories could not be exported")
    return path, len(tree.leaves)


def validate(python: str, records: Path) -> dict[str, Any]:
    """verl's verdict on the records (`_VALIDATE`'s report). Raises VerlMissing when verl
    does not import there, RuntimeError when a record fails."""
    probe = subprocess.run([python, "-c", "import verl.experimental.agent_loop.agent_loop"],
                           capture_output=True, text=True, timeout=600)
    if probe.returncode != 0:
        raise VerlMissing(f"verl does not import in {python}: "
                          f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    done = subprocess.run([python, "-c", _VALIDATE, str(records)], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"verl refused a record: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(python: str | None = None, k: int = 4) -> dict[str, Any]:
    """Grow, export and validate; the report. Raises VerlMissing, RuntimeError."""
    interpreter = python or os.environ.get("CORRAL_VERL_PYTHON") or sys.executable
    before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="corral-verl-") as tmp:
        records, leaves = asyncio.run(grow_and_export(Path(tmp), k))
        lines = len(records.read_text().splitlines())
        grown = time.perf_counter() - started
        verdict = validate(interpreter, records)
    return {"benchmark": "verl", "k": k, "leaves": leaves, "records": lines,
            **verdict, "all_validated": verdict["validated"] == lines,
            "grow_export_seconds": round(grown, 3),
            "validate_seconds": round(time.perf_counter() - started - grown, 3),
            "machine": {"cores": os.cpu_count(), "kernel": platform.release(),
                        "python": platform.python_version(), "load_before": before,
                        "load_after": [round(x, 2) for x in os.getloadavg()]}}


def render(report: dict[str, Any]) -> Table:
    table = Table(title=f"verl {report['verl_version']} AgentLoopOutput against the export")
    table.add_column("check")
    table.add_column("result")
    table.add_row("records built by verl", f"{report['validated']} of {report['records']}")
    table.add_row("leaves (K per fork)", f"{report['leaves']} (K = {report['k']})")
    table.add_row("verl's required fields", ", ".join(report["required"]))
    table.add_row("record keys verl does not declare", ", ".join(report["undeclared"]))
    return table
