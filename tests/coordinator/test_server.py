"""The HTTP API end to end: a real server on 127.0.0.1, the real client."""

from __future__ import annotations

import re

import aiohttp
import pytest

from coordinator import (
    Forbidden,
    NotFound,
    PatchError,
    PathError,
    RewindError,
    ScopeExists,
    UnknownScope,
)
from coordinator.client import ClientError
from coordinator.server._app import API_ROUTES
from coordinator.server._openapi import openapi
from coordinator.server._routes import ROUTES

from .server_fixtures import serve


@pytest.fixture
async def srv(tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo) as s:
        yield s


async def test_fork_write_read_log_round_trip(srv):
    """A scope forked over HTTP gets a token that writes, reads and logs its own scope."""
    c = srv.client
    fork = await c.fork("root", "alice")
    assert fork.scope.parent == "root" and fork.token.startswith("s.alice.")
    alice = c.with_token(fork.token)
    r = await alice.write("alice", "src/new.py", b"\x00binary\xff")
    assert r.ok and r.commit and r.effect.id == "alice#1"
    assert await alice.read("alice", "src/new.py") == b"\x00binary\xff"
    assert "new.py" in await alice.listdir("alice", "src")
    p = await alice.patch("alice", "src/app.py", "@@ -1 +1 @@\n-line 1\n+LINE 1\n")
    assert p.ok
    assert (await alice.read("alice", "src/app.py")).startswith(b"LINE 1\n")
    d = await alice.delete("alice", "docs/guide.md")
    assert d.ok
    log = await alice.log("alice")
    assert [e.effect.kind for e in log.entries if e.effect] == [
        "scope.fork", "fs.write", "fs.patch", "fs.delete"]
    shown = await alice.show(r.commit)
    assert shown.effect is not None and shown.effect.id == "alice#1"
    assert [s.name for s in await alice.scopes()] == ["alice"]


async def test_conflict_guard_blocks_a_conflicting_write_over_http(srv):
    """Under the guard, the second conflicting write is blocked with a reason naming the owner."""
    c = srv.client
    await c.fork("root", "a")
    await c.fork("root", "b")
    assert (await c.write("a", "src/util.py", b"def helper():\n    return 2\n")).ok
    r = await c.write("b", "src/util.py", b"def helper():\n    return 3\n")
    assert not r.ok and r.status == "blocked" and r.verdict == "block"
    assert "scope a" in r.reason and "src/util.py" in r.reason


@pytest.mark.slow
async def test_exec_merge_rewind_discard(tmp_path, sample_repo):
    """exec returns its output; merge reports conflicts as data; rewind and discard work."""
    async with serve(tmp_path / "state", sample_repo, guard=False) as srv:
        await _exec_merge_rewind_discard(srv)


async def _exec_merge_rewind_discard(srv):
    c = srv.client
    await c.fork("root", "a")
    await c.fork("root", "b")
    e = await c.exec("a", ["sh", "-c", "echo out; echo made > made.txt"])
    assert e.ok and e.returncode == 0
    assert e.stdout_b64 == b"out\n"  # the client's model holds the decoded bytes
    await c.write("a", "src/util.py", b"def helper():\n    return 2\n")
    await c.write("b", "src/util.py", b"def helper():\n    return 3\n")
    dry = await c.merge("root", "a", dry_run=True)
    assert dry.ok and dry.dry_run and dry.commit is None
    assert (await c.merge("root", "a")).commit
    conflicted = await c.merge("root", "b")
    assert not conflicted.ok and conflicted.conflicts[0].path == "src/util.py"
    assert conflicted.conflicts[0].hunks
    assert (await c.merge("root", "b", strategy="theirs")).ok
    r = await c.rewind("b", steps=1)
    assert r.ok
    kinds = [e.effect.kind for e in (await c.log("b")).entries if e.effect]
    assert kinds == ["scope.fork", "scope.rewind"]
    # the admin's rewind was preceded by its control record (a `decision` effect),
    # now on the archived head; the rewind names it as its cause
    control = await c.show(r.effect.intent.head)
    assert control.effect.kind == "decision" and control.effect.intent.action == "rewind"
    assert r.effect.cause == control.effect.id
    assert await c.read("b", "src/util.py") == b"def helper():\n    return 1\n"
    first = await c.discard("b")
    assert first.ok and first.effect.kind == "scope.discard"
    with pytest.raises(UnknownScope):
        await c.scope("b")
    # discarding again is idempotent: it answers the discard that was
    again = await c.discard("b")
    assert again.commit == first.commit and again.effect == first.effect


async def test_scope_tokens_act_only_on_their_subtree(srv):
    """A scope token acts on its scope and its forks; elsewhere 403; no token 401."""
    c = srv.client
    a = c.with_token((await c.fork("root", "a")).token)
    await c.fork("root", "b")
    child = await a.fork("a", "a1")
    assert (await a.write("a1", "x.txt", b"x")).ok
    assert (await c.with_token(child.token).write("a1", "y.txt", b"y")).ok
    with pytest.raises(Forbidden):
        await c.with_token(child.token).write("a", "x.txt", b"x")
    with pytest.raises(Forbidden):
        await a.write("b", "x.txt", b"x")
    with pytest.raises(Forbidden):
        await a.read("root", "README.md")
    with pytest.raises(Forbidden):
        await a.merge("a", "b")
    with pytest.raises(Forbidden):
        await a.gate_pending()
    with pytest.raises(Forbidden):
        await a.inject("a", "hi")
    from coordinator import AuthError
    with pytest.raises(AuthError):
        await c.with_token("s.a.0000").write("a", "x.txt", b"x")
    with pytest.raises(AuthError):
        await c.with_token("").scopes()
    assert (await a.merge("a", "a1")).ok


@pytest.mark.slow
async def test_bad_input_is_a_clear_4xx_and_writes_nothing(srv, tmp_path):
    """Malformed JSON, unknown fields, wrong types, escapes, unknown scopes: 4xx, no write."""
    c = srv.client
    await c.fork("root", "a")
    head = (await c.scope("a")).head
    url = srv.url + "/v1/scopes/a/write"
    h = {"Authorization": "Bearer " + c.token}
    async with aiohttp.ClientSession() as s:
        for body, status, error in [
            (b"{not json", 400, "MalformedJSON"),
            (b'{"path": "x", "content_b64": "eA==", "extra": 1}', 422, "ValidationError"),
            (b'{"path": 3, "content_b64": "eA=="}', 422, "ValidationError"),
            (b'{"path": "x", "content_b64": "%%%"}', 422, "ValidationError"),
            (b'{"path": "x", "content_b64": "eA==", "mode": 511}', 422, "ValidationError"),
            (b"[]", 422, "ValidationError"),
            (b'{"path": "../x", "content_b64": "eA=="}', 400, "PathError"),
            (b'{"path": "/etc/passwd", "content_b64": "eA=="}', 400, "PathError"),
            (b'{"path": ".git/config", "content_b64": "eA=="}', 400, "PathError"),
            (b'{"path": "a\\u0000b", "content_b64": "eA=="}', 400, "PathError"),
            (b'{"path": "' + b"n" * 300 + b'", "content_b64": "eA=="}', 422, "ValidationError"),
        ]:
            async with s.post(url, data=body, headers=h) as r:
                payload = await r.json()
                assert (r.status, payload.get("error")) == (status, error), (body, payload)
                assert payload["detail"]
        async with s.post(srv.url + "/v1/scopes/nope/write", headers=h,
                          data=b'{"path": "x", "content_b64": "eA=="}') as r:
            assert r.status == 404 and (await r.json())["error"] == "UnknownScope"
        async with s.get(srv.url + "/v1/nothing-here", headers=h) as r:
            assert r.status == 404 and (await r.json())["error"] == "NotFound"
    # a symlink in the workspace that leads outside
    (srv.hub.coordinator.scope("a").path / "out").symlink_to(tmp_path)
    with pytest.raises(PathError):
        await c.write("a", "out/evil.txt", b"x")
    assert not (tmp_path / "evil.txt").exists()
    with pytest.raises(PathError):
        await c.read("a", "out/../../x")
    with pytest.raises(FileNotFoundError):
        await c.read("a", "missing.txt")
    with pytest.raises(PatchError):
        await c.patch("a", "README.md", "@@ -1 +1 @@\n-nope\n+x\n")
    with pytest.raises(RewindError):
        await c.rewind("a", steps=99)
    with pytest.raises(NotFound):
        await c.rewind("a", "deadbeef")
    with pytest.raises(NotFound):
        await c.show("0" * 40)
    with pytest.raises(ScopeExists):
        await c.fork("root", "a")
    with pytest.raises(ClientError) as e:
        await c.fork("root", "bad name")
    assert e.value.status == 422
    with pytest.raises(ClientError) as e:
        await c.discard("root")
    assert e.value.status == 400
    # a symlink was added directly by the test, so compare the trace: nothing written
    assert (await c.scope("a")).head == head


@pytest.mark.slow
async def test_oversized_body_is_413(tmp_path, sample_repo):
    """A body over --max-body is refused with 413 and writes nothing."""
    async with serve(tmp_path / "state", sample_repo, max_body=1024) as srv:
        await srv.client.fork("root", "a")
        with pytest.raises(ClientError) as e:
            await srv.client.write("a", "big.bin", b"x" * 4096)
        assert e.value.status == 413
        assert len((await srv.client.log("a")).entries) == 1


@pytest.mark.slow
async def test_every_route_is_documented_in_openapi(srv):
    """Each route the app serves appears in /openapi.json with its method."""
    doc = await srv.client.request("GET", "/openapi.json")
    assert doc["openapi"].startswith("3.1")
    served = {
        (r.method.lower(), r.resource.canonical)
        for r in srv.app.router.routes() if r.method != "HEAD" and r.resource is not None
    }
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served and served <= documented
    assert doc == openapi(srv.app[API_ROUTES])  # the core's ROUTES and extensions'
    assert set(ROUTES) <= set(srv.app[API_ROUTES])
    write_op = doc["paths"]["/v1/scopes/{name}/write"]["post"]
    ref = write_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["additionalProperties"] is False


@pytest.mark.slow
async def test_inject_and_handoff_are_recorded_as_decisions(srv):
    """inject delivers a message into the inbox; handoff merges the source's work;
    both are `decision` effects on the target's branch."""
    c = srv.client
    a = c.with_token((await c.fork("root", "a")).token)
    await c.fork("root", "b")
    await c.write("b", "b.txt", b"from b\n")
    r = await c.inject("a", "look at b.txt")
    assert r.ok and r.effect.kind == "decision"
    msgs = await a.take_messages("a")
    assert [m.text for m in msgs] == ["look at b.txt"]
    assert await a.take_messages("a") == []
    m = await c.handoff("a", "b", note="continue b's work")
    assert m.ok and await a.read("a", "b.txt") == b"from b\n"
    kinds = [e.effect.intent.action for e in (await c.log("a")).entries
             if e.effect and e.effect.kind == "decision"]
    assert kinds == ["inject", "handoff", "inject"]
    assert [m.text for m in await a.take_messages("a")] == ["continue b's work"]
    sent = await a.send("a", "b", "hello b")
    taken = srv.hub.coordinator.scope("b").take_messages()
    assert sent.ok and [m.text for m in taken] == ["hello b"]


@pytest.mark.slow
async def test_metrics_expose_the_coordinator(srv):
    """/metrics has effects, review latency, op latency, scopes, layer bytes and tokens."""
    c = srv.client
    await c.fork("root", "a")
    await c.write("a", "x.txt", b"hello")
    srv.hub.coordinator.metrics.tokens(prompt=100, cached=80, completion=7)
    text = await c.metrics()
    for needle in [
        'corral_effects_total{kind="fs.write",verdict="allow"} 1.0',
        'corral_intent_review_seconds_count{kind="fs.write"} 1.0',
        'corral_effect_seconds_count{kind="fs.write"} 1.0',
        'corral_scope_operation_seconds_count{op="fork"} 1.0',
        "corral_active_scopes 2.0",
        'corral_layer_bytes{scope="a"}',
        'corral_model_tokens_total{type="cached"} 80.0',
        "corral_merge_conflicts_total 0.0",
    ]:
        assert needle in text, needle
    # (a background checkpoint may already have moved the write: no figure before)
    assert re.search(r"^corral_trace_journal_bytes \S+$", text, re.M)
    await srv.hub.coordinator.checkpoint()
    text = await c.metrics()
    assert "corral_trace_journal_bytes 0.0" in text
    done = re.search(r"^corral_trace_checkpoint_seconds_count (\S+)$", text, re.M)
    assert float(done[1]) >= 1
    moved = re.search(r"^corral_trace_checkpoint_objects_total (\S+)$", text, re.M)
    assert float(moved[1]) >= 4  # the blob, a tree, two commits


def _git_diff(tmp_path, files: dict[str, bytes], edit: dict[str, bytes]) -> str:
    """`git diff` of `edit` over `files`, made by git itself in a scratch repository."""
    import subprocess

    repo = tmp_path / "gd"
    repo.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True,
                              capture_output=True, text=True).stdout

    git("init", "-q")
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for name, data in edit.items():
        (repo / name).write_bytes(data)
    return git("diff")


async def test_whole_multi_file_patch_over_http(srv, tmp_path):
    """Without `path`, /patch takes a whole `git diff`: one effect, one commit
    changing both files. One that does not apply is a 400 with git's reason
    and writes nothing; `three_way` must be a real boolean (422 otherwise)."""
    c = srv.client
    await c.fork("root", "a")
    old = {p: await c.read("a", p) for p in ("README.md", "src/app.py")}
    new = {p: d + b"added by the patch\n" for p, d in old.items()}
    diff = _git_diff(tmp_path, old, new)
    assert diff.count("diff --git") == 2
    before = len((await c.log("a")).entries)
    r = await c.patch("a", diff, cause="two files")
    assert r.ok and r.commit and r.effect.kind == "fs.patch"
    assert {p: await c.read("a", p) for p in old} == new
    assert len((await c.log("a")).entries) == before + 1
    repo = srv.hub.coordinator.trace.repo
    commit = repo[r.commit]
    changed = {d.delta.new_file.path for d in repo.diff(commit.parents[0], commit)}
    assert changed == {"README.md", "src/app.py"}

    # the same patch again no longer applies: 400, git's reason, nothing written
    head = (await c.log("a")).entries[-1].commit
    with pytest.raises(PatchError, match=r"patch does not apply|patch failed"):
        await c.patch("a", diff)
    assert {p: await c.read("a", p) for p in old} == new
    assert (await c.log("a")).entries[-1].commit == head
    h = {"Authorization": "Bearer " + c.token}
    async with aiohttp.ClientSession(headers=h) as s:
        async with s.post(srv.url + "/v1/scopes/a/patch", json={"diff": diff}) as resp:
            body = await resp.json()
            assert resp.status == 400 and body["error"] == "PatchError", body
            assert "apply" in body["detail"], body
        async with s.post(srv.url + "/v1/scopes/a/patch",
                          json={"diff": diff, "three_way": 1}) as resp:
            assert resp.status == 422 and (await resp.json())["error"] == "ValidationError"
        # review takes the same body: the whole patch is judged, nothing is written
        again = _git_diff(tmp_path / "r", new, {p: d + b"more\n" for p, d in new.items()})
        async with s.post(srv.url + "/v1/scopes/a/review",
                          json={"patch": {"diff": again}}) as resp:
            body = await resp.json()
            assert resp.status == 200 and body["status"] == "allowed", body
            assert {c["path"] for c in body["effect"]["intent"]["changes"]} == set(old)
    assert {p: await c.read("a", p) for p in old} == new


async def test_fork_at_an_earlier_commit_over_http(srv):
    """`at` forks from a commit in the parent's history, not only its head: the
    child's head tree is that commit's tree and its workspace reads as it did
    then. A commit off the parent's history is refused (400), as is an unknown one."""
    c = srv.client
    alice = c.with_token((await c.fork("root", "alice")).token)
    first = await alice.write("alice", "src/new.py", b"one\n")
    await alice.write("alice", "src/new.py", b"two\n")
    await alice.delete("alice", "docs/guide.md")
    assert first.commit
    child = await c.fork("alice", "alice-old", at=first.commit[:10])
    assert child.scope.parent == "alice"
    trace = srv.hub.coord.trace
    assert trace.commit(child.scope.head).tree_id == trace.commit(first.commit).tree_id
    assert await c.read("alice-old", "src/new.py") == b"one\n"
    assert "guide.md" in await c.listdir("alice-old", "docs")
    assert await c.read("alice", "src/new.py") == b"two\n"  # the parent is untouched
    # and the child writes on from there
    w = await c.with_token(child.token).write("alice-old", "src/other.py", b"three\n")
    assert w.ok
    bob = await c.fork("root", "bob")
    with pytest.raises(RewindError):
        await c.fork("bob", "bob-2", at=first.commit)  # alice's commit, not bob's history
    with pytest.raises(NotFound):
        await c.fork("root", "nowhere", at="deadbeef")
    assert bob.scope.name == "bob"
    schemas = openapi(srv.app[API_ROUTES])["components"]["schemas"]
    assert "at" in schemas["ForkRequest"]["properties"]


@pytest.mark.slow
async def test_log_entries_and_graph_nodes_carry_the_commit_time(tmp_path, sample_repo):
    """Each log entry and graph node says when it was recorded: the commit's time
    (the coordinator's clock, whole epoch seconds), for timelines."""
    ticks = iter(range(1_700_000_000, 1_700_001_000, 7))
    async with serve(tmp_path / "state", sample_repo, clock=lambda: next(ticks)) as s:
        c = s.client
        await c.fork("root", "alice")
        await c.write("alice", "a.txt", b"a\n")
        entries = (await c.log("alice")).entries
        times = [e.time for e in entries if e.effect]
        assert len(times) == 2 and times == sorted(times) and times[1] - times[0] == 7
        page = await c.log("alice", limit=1)
        assert page.entries[0].time == times[-1]
        graph = await c.request("GET", "/v1/graph")
        by_commit = {n["commit"]: n["time"] for n in graph["nodes"]}
        assert [by_commit[e.commit] for e in entries if e.effect] == times


async def test_a_rewind_with_both_or_neither_target_is_the_one_checks_400(tmp_path, sample_repo):
    """The route does not check the arguments itself: Scope.rewind's one check answers,
    the same RewindError (400) a Python caller gets."""
    async with serve(tmp_path / "state", sample_repo) as srv:
        await srv.client.fork("root", "a")
        for body in ({}, {"to": "0" * 40, "steps": 1}):
            with pytest.raises(RewindError, match="give exactly one of `to` or `steps`"):
                await srv.client.request("POST", "/v1/scopes/a/rewind", json_body=body)
