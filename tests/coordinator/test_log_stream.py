"""The whole-branch log is streamed: `Trace.stream` yields each effect as its
record is decoded (the line is found first, without decoding), oldest first,
with exactly what the newest-first walk finds; `Trace.log` is its list; the
HTTP route sends the same JSON a chunk at a time; `corral trace log` prints as
it reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.records._wire import LogResponse, TraceEntryOut
from coordinator.store._trace import Trace, TraceEntry

from .server_fixtures import serve

pytestmark = pytest.mark.asyncio


class CountingTrace(Trace):
    """A read-only trace that counts the records it decodes."""

    decoded = 0

    def entry_of(self, commit):  # type: ignore[no-untyped-def]
        self.decoded += 1
        return super().entry_of(commit)


def walked(trace: Trace, head: str) -> list[TraceEntry]:
    """The reference: the newest-first walk, reversed."""
    return list(reversed(list(trace.walk(head))))


async def _branches(state: Path, repo: Path) -> dict[str, str]:
    """A trace with a forked scope that wrote, rewound and merged: name -> head."""
    async with Coordinator.open(state, repo=repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        for i in range(12):
            await a.write(f"a{i % 3}.txt", f"{i}\n".encode())
        b = await a.fork("b")
        await b.write("b.txt", b"b\n")
        await a.rewind(steps=2)
        await a.write("after.txt", b"x\n")
        await a.merge(b)
        await coord.root.write("root.txt", b"r\n")
        return {"a": a.head, "b": b.head, "root": coord.root.head}


async def test_the_stream_decodes_one_record_per_effect_it_has_yielded(tmp_path, sample_repo):
    """Taking the first effect of a long branch decodes one record, not the
    branch: the line is found without decoding, the records are read as asked."""
    heads = await _branches(tmp_path / "state", sample_repo)
    trace = CountingTrace(tmp_path / "state" / "trace.git", writable=False)
    stream = trace.stream(heads["a"])
    first = next(stream)
    assert trace.decoded == 1
    assert first.effect is not None and first.effect.kind == "scope.fork"
    second = next(stream)
    assert trace.decoded == 2 and second.effect is not None
    rest = list(stream)
    assert trace.decoded == 2 + len(rest)


async def test_the_stream_yields_what_the_walk_finds_oldest_first(tmp_path, sample_repo):
    """For a branch with writes, a rewind and a merge, for its fork's branch,
    the root's, a commit in the middle and the snapshot itself, the stream (and
    `log`) equal the newest-first walk reversed."""
    heads = await _branches(tmp_path / "state", sample_repo)
    trace = Trace(tmp_path / "state" / "trace.git", writable=False)
    middle = walked(trace, heads["a"])[5].commit
    snapshot = trace.snapshot()
    assert snapshot is not None
    for head in (*heads.values(), middle, snapshot):
        expected = walked(trace, head)
        assert list(trace.stream(head)) == expected
        assert trace.log(head) == expected
    assert trace.log(snapshot) == []
    assert [e.effect.seq for e in trace.log(heads["b"]) if e.effect and e.effect.scope == "b"] \
        == [0, 1]


async def test_a_stream_read_from_two_threads_in_turn_is_the_same_log(tmp_path, sample_repo):
    """A stream advanced on one thread and finished on another (as the HTTP route
    reads it, a chunk per thread hop) yields the same entries."""
    heads = await _branches(tmp_path / "state", sample_repo)
    trace = Trace(tmp_path / "state" / "trace.git", writable=False)
    stream = trace.stream(heads["a"])
    got = [next(stream), next(stream)]
    other = threading.Thread(target=lambda: got.extend(stream))
    other.start()
    other.join()
    assert got == walked(trace, heads["a"])


async def test_the_whole_log_route_sends_the_same_json_a_chunk_at_a_time(tmp_path, sample_repo):
    """`/log` without parameters answers chunked (no Content-Length), with the
    bytes the whole `LogResponse` would have had, across several chunks."""
    from coordinator.server import _routes as _routes

    async with serve(tmp_path / "state", sample_repo) as srv:
        coord = srv.hub.coordinator
        a = await coord.root.fork("a")
        for i in range(_routes.LOG_CHUNK + 20):
            await a.write(f"f{i % 7}.txt", f"{i}\n".encode())
        async with srv.client.session.get(
            f"{srv.url}/v1/scopes/a/log", headers={"Authorization": "Bearer " + srv.client.token}
        ) as resp:
            assert resp.status == 200
            assert resp.headers.get("Transfer-Encoding") == "chunked"
            assert resp.content_type == "application/json"
            body = await resp.read()
        entries = coord.trace.log(a.head)
        expected = LogResponse(scope="a", entries=[TraceEntryOut(
            commit=e.commit, parents=list(e.parents), tree=e.tree, subject=e.subject,
            effect=e.effect, time=e.time) for e in entries])
        assert body == expected.model_dump_json().encode()
        assert len(json.loads(body)["entries"]) == _routes.LOG_CHUNK + 21
        missing = await srv.client.session.get(
            f"{srv.url}/v1/scopes/nope/log",
            headers={"Authorization": "Bearer " + srv.client.token})
        assert missing.status == 404


async def test_the_log_command_prints_a_forks_effects_from_its_fork_on(tmp_path, sample_repo):
    """`corral trace log <scope> --json` lists the scope's own effects from its
    fork on; `--full` adds its parent's before it; the root (no fork) lists all."""
    from typer.testing import CliRunner

    from coordinator.cli import app

    heads = await _branches(tmp_path / "state", sample_repo)
    trace = Trace(tmp_path / "state" / "trace.git", writable=False)
    runner = CliRunner()

    def lines(*args: str) -> list[str]:
        done = runner.invoke(app, ["trace", "log", *args, "--state", str(tmp_path / "state"),
                                   "--json"])
        assert done.exit_code == 0, done.output
        return [json.loads(ln)["commit"] for ln in done.stdout.splitlines()]

    whole = [e.commit for e in walked(trace, heads["b"])]
    fork = next(i for i, e in enumerate(walked(trace, heads["b"]))
                if e.effect and e.effect.kind == "scope.fork" and e.effect.scope == "b")
    assert fork > 0
    assert lines("b") == whole[fork:]
    assert lines("b", "--full") == whole
    assert lines("root") == [e.commit for e in walked(trace, heads["root"])]
