"""Names and paths git cannot record are refused with a 400 that writes nothing;
a taken scope name is a 409 for every fork but one (issue 9, findings 8-11)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import Coordinator, PathError, ScopeExists
from coordinator.client import ClientError
from coordinator.records._paths import check_scope_name
from coordinator.store._trace import ARCHIVE_PREFIX

from .server_fixtures import serve


@pytest.fixture
async def srv(tmp_path, sample_repo):
    async with serve(tmp_path / "state", sample_repo) as s:
        yield s


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


@pytest.mark.parametrize("name", ["a..b", "x.", "a.lock", "a@{1}", "a\x01b", "a\nb", "-a"])
async def test_fork_refuses_names_git_refuses_as_refs(srv, name):
    """A scope name that is not a valid git ref is refused before anything is written."""
    c = srv.client
    before = srv.hub.coordinator.trace.refs("refs/")
    with pytest.raises((PathError, ClientError)) as e:
        await c.fork("root", name)
    assert e.value.status in (400, 422), e.value  # 422: the schema's pattern already refuses
    assert srv.hub.coordinator.trace.refs("refs/") == before
    assert name not in srv.hub.coordinator.scopes
    await srv.hub.coordinator.checkpoint()  # the checkpoint still works: no bad ref was journaled


@pytest.mark.slow
async def test_python_fork_of_a_bad_name_raises_path_error(tmp_path, sample_repo):
    """The Python API refuses the same names (PathError), with nothing journaled."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        for name in ("a..b", "x.", "b.lock"):
            with pytest.raises(PathError, match="ref name"):
                await coord.root.fork(name)
        assert coord.trace.scope_names() == ["root"]


@pytest.mark.slow
async def test_a_journal_holding_an_invalid_ref_is_salvaged_on_open(tmp_path, sample_repo):
    """A state dir whose journal names a ref git refuses (what older versions
    wrote for a scope named `x.`, then were killed) opens, checkpoints, and
    keeps that history under an archive ref."""
    state = tmp_path / "s"
    async with Coordinator.open(state, sample_repo) as coord:
        head = (await (await coord.root.fork("a")).write("f.txt", b"x")).commit
    # A process journals the bad ref move and dies before any checkpoint.
    code = ("import os, sys; from pathlib import Path; "
            "from coordinator.store._journal import Journal; "
            "j = Journal(Path(sys.argv[1]), writable=True); "
            "j.move_ref('refs/corral/scopes/x.', sys.argv[2]); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(state / "trace.git"), head], check=True)
    async with Coordinator.open(state) as coord:
        assert "x." not in coord.scopes
        await coord.checkpoint()
        salvaged = coord.trace.refs(ARCHIVE_PREFIX + "invalid-name-")
        assert [coord.trace.ref(r) for r in salvaged] == [head]
    repo = pygit2.Repository(str(state / "trace.git"))
    assert all(pygit2.reference_is_valid_name(r) for r in repo.references)


BAD_PATHS = [
    ".GIT/config",
    ".Git/hooks/pre-commit",
    ".git./x",
    ".git /x",
    ".git../x",
    "src/.git::$INDEX_ALLOCATION/x",
    "GIT~1/config",
    ".g\u200cit/config",
    "a\n\nb.txt",
    "tab\there.txt",
    "bell\x07.txt",
    "del\x7f.txt",
    "/".join(["d"] * 1500) + "/deep.txt",
    "/".join(["d"] * 200) + "/deep.txt",
    "/".join(c * 250 for c in "stuvwxyz") + "/" + "r" * 100,  # 2,108 bytes
]


@pytest.mark.slow
@pytest.mark.parametrize("path", BAD_PATHS, ids=range(len(BAD_PATHS)))
async def test_bad_paths_are_a_400_that_writes_nothing(srv, path):
    """`.git` in any spelling git refuses, control characters, too deep or too
    long: 400 PathError over HTTP, no commit, nothing in the workspace, and the
    server still shuts down cleanly (no leftover mount)."""
    c = srv.client
    await c.fork("root", "a")
    scope = srv.hub.coordinator.scope("a")
    head = scope.head
    before = sorted(os.listdir(scope.workspace.backing))
    for call in (
        c.write("a", path, b"x"),
        c.delete("a", path),
        c.patch("a", path, "@@ -0,0 +1 @@\n+x\n"),
    ):
        with pytest.raises((PathError, ClientError)) as e:
            await call
        # 422 where the request schema already refuses it (a component > 255 bytes)
        assert isinstance(e.value, PathError) or e.value.status == 422, e.value
    with pytest.raises(PathError):
        await c.read("a", path)
    assert scope.head == head
    assert sorted(os.listdir(scope.workspace.backing)) == before


async def test_a_deep_path_leaves_no_mount_after_shutdown(tmp_path, sample_repo):
    """The 1,500-level path of the attack run is refused; shutdown unmounts everything."""
    state = tmp_path / "state"
    async with serve(state, sample_repo) as srv:
        await srv.client.fork("root", "a")
        with pytest.raises((PathError, ClientError)):  # 422: longer than the schema allows
            await srv.client.write("a", "/".join(["d"] * 1500) + "/x", b"x")
        with pytest.raises(PathError, match="deeper"):
            await srv.client.write("a", "/".join(["d"] * 600) + "/x", b"x")
        assert (await srv.client.write("a", "ok.txt", b"x")).ok
    assert _mounts_under(state) == []


@pytest.mark.slow
async def test_a_path_with_newlines_cannot_corrupt_the_log(tmp_path, sample_repo):
    """Newlines are refused; a record whose subject did hold them (older
    versions) still decodes, so the scope keeps its parent after a restart."""
    state = tmp_path / "s"
    async with Coordinator.open(state, sample_repo) as coord:
        a = await coord.root.fork("a")
        b = await a.fork("b")
        with pytest.raises(PathError, match="control"):
            await b.write("a\n\nb.txt", b"x")
        # A summary never spans lines, whatever the intent holds.
        assert (await b.exec(["sh", "-c", "printf 'x\\n\\ny' > /dev/null"])).ok
        entry = coord.trace.show(b.head)
        assert "\n" not in entry.subject and entry.effect is not None
        # An old record: the subject split by a path with blank lines in it.
        fork_commit = coord.trace.commit(b.fork_point)
        eff = coord.trace.entry_of(fork_commit).effect
        assert eff is not None
        repo = coord.trace.repo
        msg = f"fs.write a\n\nb.txt\n\n{eff.model_dump_json()}\n"
        oid = repo.create_commit(None, fork_commit.author, fork_commit.committer, msg,
                                 fork_commit.tree_id, [fork_commit.id])
        decoded = coord.trace.entry_of(repo[oid])
        assert decoded.effect == eff and "\n" not in decoded.subject
    async with Coordinator.open(state) as coord:
        assert coord.scope("b").parent == "a"


async def test_racing_forks_of_one_name_give_one_200_and_409s(srv):
    """Twenty rounds of two parents forking the same child name at once: exactly
    one wins each time, the loser gets 409, no mount or ref leaks, the winner's
    token works."""
    c = srv.client
    await c.fork("root", "p1")
    await c.fork("root", "p2")
    coord = srv.hub.coordinator
    for i in range(20):
        name = f"child{i}"
        results = await asyncio.gather(c.fork("p1", name), c.fork("p2", name),
                                       return_exceptions=True)
        wins = [r for r in results if not isinstance(r, BaseException)]
        losses = [r for r in results if isinstance(r, BaseException)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert isinstance(losses[0], ScopeExists) and losses[0].status == 409  # type: ignore[attr-defined]
        child = wins[0]
        assert (await c.with_token(child.token).write(name, "f.txt", b"x")).ok
        assert coord.trace.head(name) == coord.scope(name).head
    # one workspace per live scope: root, p1, p2 and the twenty winners
    assert len(coord.scopes) == 23
    assert len(coord.trace.scope_names()) == 23


@pytest.mark.parametrize("script", [
    "mkdir .GIT && echo x > .GIT/config",
    "mkdir '.git.' && echo x > '.git./x' && echo ok > fine.txt",
    "git init -q",
    "printf x > \"$(printf 'a\\nb')\"",
    "d=$(printf 'd/%.0s' $(seq 200)) && mkdir -p $d && echo x > ${d}f",
])
async def test_a_command_writing_an_unrecordable_path_applies_nothing(srv, script):
    """A command that writes a path git cannot record (or that Corral refuses)
    gets a 400 PathError naming it; none of its changes reach the workspace."""
    c = srv.client
    await c.fork("root", "a")
    scope = srv.hub.coordinator.scope("a")
    before = sorted(os.listdir(scope.workspace.backing))
    with pytest.raises(PathError, match="none of its changes are applied"):
        await c.exec("a", ["sh", "-c", script])
    assert sorted(os.listdir(scope.workspace.backing)) == before
    [last] = [e.effect for e in (await c.log("a")).entries][-1:]
    assert last is not None and last.status == "failed"
    assert "cannot be recorded" in (last.error or "")


@pytest.mark.slow  # near the 8 s fast budget on a loaded 2-core machine
@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="ab.-_0@{}/ ~^:?*[\\l", min_size=1, max_size=12)
       | st.sampled_from(["a..b", "a.", "a.lock", "x.lock.y", "a-.lock", "ab_.", "a.b.c"]))
def test_a_scope_name_is_one_git_takes_in_every_ref_corral_makes(name: str):
    """check_scope_name's own rule agrees with libgit2's on the refs of a scope."""
    refs = (f"refs/corral/scopes/{name}", f"refs/corral/archive/{name}-0",
            f"refs/corral/archive/{name}/rewound-0")
    git_takes = all(pygit2.reference_is_valid_name(r) for r in refs)
    try:
        check_scope_name(name)
        accepted = True
    except PathError:
        accepted = False
    assert not accepted or git_takes, f"{name!r} accepted but git refuses its refs"
    if git_takes and len(name) <= 64 and name[:1].isalnum() and set(name) <= set(
            "abl0._-"):
        assert accepted, f"{name!r} refused but git takes it"
