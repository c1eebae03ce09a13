"""A trace written by an earlier Corral (format version 1, tests/fixtures/trace-v1.tar.gz,
made by tests/fixtures/make_trace_v1.py) keeps opening: every effect reads, and its
scopes can still be rewound and merged."""

from __future__ import annotations

import tarfile
from pathlib import Path

from coordinator import FORMAT_VERSION, Coordinator, Trace
from coordinator.store._trace import ARCHIVE_PREFIX

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace-v1.tar.gz"

KINDS = {"scope.fork", "fs.write", "fs.patch", "fs.delete", "exec", "message",
         "scope.rewind", "scope.merge", "scope.discard"}


def _state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(state, filter="data")
    return state


def test_every_effect_of_the_v1_trace_reads(tmp_path: Path) -> None:
    """Each commit on every branch (live scopes and archives) parses as an effect of
    format version 1, and together they cover every kind the fixture recorded."""
    trace = Trace(_state(tmp_path) / "trace.git", writable=False)
    heads = [trace.head(s) for s in trace.scope_names()]
    heads += [trace.ref(r) for r in trace.refs(ARCHIVE_PREFIX)]
    entries = {e.commit: e for head in heads if head for e in trace.log(head)}
    effects = [e.effect for e in entries.values() if e.effect is not None]
    assert {e.v for e in effects} == {1} and FORMAT_VERSION >= 1
    assert KINDS <= {e.kind for e in effects}
    assert any(e.status == "blocked" for e in effects)
    for eff in effects:  # every blob an effect names is in the trace
        for oid in (getattr(eff.intent, "blob", None), getattr(eff.outcome, "stdout", None)):
            if oid:
                trace.blob(oid)
    assert set(trace.scope_names()) >= {"root", "alice", "bob"}


async def test_the_v1_trace_reopens_rewinds_and_merges(tmp_path: Path) -> None:
    """Opened by today's coordinator, the old scopes hold their files, a rewind goes
    back one effect, and bob's branch merges into root."""
    async with Coordinator.open(_state(tmp_path), backend="copy") as coord:
        root, bob = coord.scope("root"), coord.scope("bob")
        assert await root.read("src/util.py") == b"def helper():\n    return 2\n"
        assert await root.read("made.txt") == b"made\n"
        assert await bob.read("notes.md") == b"first\n"
        await root.write("late.txt", b"written by today's code\n")
        assert (await root.rewind(steps=1)).ok
        assert "late.txt" not in await root.listdir("")
        m = await root.merge(bob)
        assert m.clean and m.commit is not None
        assert await root.read("notes.md") == b"first\n"
        assert coord.log(root)[-1].kind == "scope.merge"
