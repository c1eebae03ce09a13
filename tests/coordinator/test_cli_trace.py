"""`corral trace log|show|blob|graph` on a real trace: what a user needs to read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator import Coordinator
from coordinator.server._streams import event_json

LONG = "echo " + " ".join(f"word{i:02d}" for i in range(30)) + "; exit 3"


@pytest.fixture
async def state(tmp_path: Path, sample_repo: Path) -> Path:
    """root writes twice; alice forks, writes, runs a failing command with a long
    command line; her sub-scope alice-sub is forked and discarded."""
    path = tmp_path / "state"
    async with Coordinator.open(path, sample_repo, backend="copy") as coord:
        await coord.root.write("one.txt", b"1\n")
        await coord.root.write("two.txt", b"2\n")
        alice = await coord.root.fork("alice")
        await alice.write("a.txt", b"a\n")
        r = await alice.exec(["sh", "-c", LONG])
        assert r.ok
        sub = await alice.fork("alice-sub")
        await sub.write("s.txt", b"s\n")
        await sub.discard()
    return path


def _cli(*args: str) -> str:
    result = CliRunner().invoke(__import__("coordinator.cli").cli.app, list(args),
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_log_shows_exit_codes_whole_words_and_only_the_scopes_own_effects(state: Path):
    """A fork's log starts at its fork (no parent history, no repeated seqs); a command
    shows its exit code; a long command is cut at a word, not mid-word; --full adds the
    parent's history."""
    out = _cli("trace", "log", "alice", "--state", str(state))
    ids = [line.split()[1] for line in out.splitlines()[1:] if line.strip()]
    assert ids == ["alice#0", "alice#1", "alice#2"], out
    assert "materialized, exit 3" in out
    assert "word07 word08…" in out  # cut after a whole word, marked
    full = _cli("trace", "log", "alice", "--state", str(state), "--full")
    assert "root#0" in full and "root#1" in full


@pytest.mark.slow
def test_log_of_a_discarded_scope_reads_its_archive(state: Path):
    """`trace log alice-sub` after its discard shows its archived branch, with a note."""
    result = CliRunner().invoke(__import__("coordinator.cli").cli.app,
                                ["trace", "log", "alice-sub", "--state", str(state)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "alice-sub#1" in result.output and "scope.discard" in result.output
    assert "alice-sub was discarded" in result.output  # (stdout and stderr together)


@pytest.mark.slow
def test_show_inlines_blobs_and_blob_prints_one(state: Path):
    """`trace show --blobs` gives the command's output as text; `trace blob ID` prints it."""
    log = [json.loads(line) for line in
           _cli("trace", "log", "alice", "--state", str(state), "--json").splitlines()]
    exec_commit = next(e["commit"] for e in log if e["effect"]["intent"]["kind"] == "exec")
    out = state.parent / "log.jsonl"
    _cli("trace", "log", "alice", "--state", str(state), "-o", str(out))
    assert [json.loads(line) for line in out.read_text().splitlines()] == log
    shown = json.loads(_cli("trace", "show", exec_commit, "--state", str(state), "--blobs"))
    stdout_id = shown["effect"]["outcome"]["stdout"]
    assert shown["blobs"][stdout_id].startswith("word00 word01")
    assert _cli("trace", "blob", stdout_id, "--state", str(state)).startswith("word00 word01")


@pytest.mark.slow
def test_graph_names_the_refs(state: Path):
    """`trace graph` decorates commits with Corral's ref names."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from coordinator.cli import main; main()",
                          "trace", "graph", "--state", str(state)],
                         capture_output=True, text=True, check=True).stdout
    assert "refs/corral/scopes/alice" in out or "corral/scopes/alice" in out
    assert "corral/archive/alice-sub" in out


def test_decision_events_carry_no_pending_mark():
    """A decision's stream summary is the bare summary: "[pending]" never sits beside
    "allow" (intent events keep the mark: they are pending)."""
    from coordinator import Decision, Effect, FsWrite
    from coordinator.records._events import Event

    pending = Effect(id="a#1", scope="a", seq=1, parent=None, status="pending",
                     intent=FsWrite(path="x", blob="0" * 40))
    decided = pending.model_copy(update={"decision": Decision(verdict="allow")})
    assert json.loads(event_json(Event("decision", decided)))["summary"] == "fs.write x"
    assert json.loads(event_json(Event("intent", pending)))["summary"] == "fs.write x [pending]"
