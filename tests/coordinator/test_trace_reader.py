"""Reading a state's trace without the writer: `coordinator.store.open_trace`."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator, NotFound, StateError
from coordinator.store import open_trace
from tests.conftest import make_repo


@pytest.mark.asyncio
async def test_a_reader_sees_a_running_coordinators_effects_and_cannot_write(tmp_path: Path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n"})
    async with Coordinator.open(tmp_path / "state", repo, backend="copy") as coord:
        scope = await coord.root.fork("alice")
        done = await scope.write("a.txt", b"two\n")
        # Still running: the effect is in the journal, not yet in a pack.
        reader = open_trace(tmp_path / "state")
        try:
            assert "alice" in reader.scope_names()
            assert reader.head("alice") == done.commit
            entries = reader.log(done.commit)
            assert [e.effect.kind for e in entries if e.effect] == ["scope.fork", "fs.write"]
            assert entries[-1].commit == done.commit
            assert reader.read(done.commit, "a.txt") == b"two\n"
            fork = reader.fork_point("alice")
            assert fork is not None
            changed = reader.diff_trees(reader.commit_tree(fork), reader.commit_tree(done.commit))
            assert set(changed) == {"a.txt"}
            with pytest.raises(StateError, match="read-only"):
                reader.write_blob(b"x")  # type: ignore[attr-defined]
        finally:
            reader.close()
    # Closed: the same through the trace directory itself.
    reader = open_trace(tmp_path / "state" / "trace.git")
    try:
        assert reader.log(done.commit)[-1].commit == done.commit
    finally:
        reader.close()


def test_no_trace_is_named(tmp_path: Path):
    with pytest.raises(NotFound, match="no trace"):
        open_trace(tmp_path)
