"""`corral hook` answers Claude Code's hook events (payloads hand-written to its documented
schema, in hook_payloads/) from a real server: the real command in a subprocess, stdin in,
the hook protocol out."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coordinator import Decision, Intent, View, block
from tests.agents._helpers import CALC
from tests.conftest import git, make_repo
from tests.coordinator.server_fixtures import Served, serve

PAYLOADS = Path(__file__).with_name("hook_payloads")
ALICE = CALC + "\n\ndef multiply(a, b):\n    return a * b\n"


async def no_rm(intent: Intent, view: View) -> Decision | None:
    """A site rule: no recursive deletes."""
    if intent.kind == "exec" and "rm -rf" in " ".join(intent.argv):  # type: ignore[union-attr]
        return block("recursive deletes are not allowed here")
    return None


def payload(name: str, root: Path) -> dict[str, Any]:
    text = (PAYLOADS / f"{name}.json").read_text().replace("__ROOT__", str(root))
    return json.loads(text)  # type: ignore[no-any-return]


class Hook:
    """Runs the real `corral hook` for the scope `claude`."""

    def __init__(self, srv: Served | None, url: str, token: str) -> None:
        self.url, self.token = url, token
        found = shutil.which("corral", path=str(Path(sys.executable).parent))
        assert found
        self.exe = found

    async def __call__(self, event: dict[str, Any]) -> tuple[int, dict[str, Any] | None, str]:
        return await self.raw(json.dumps(event).encode())

    async def raw(self, stdin: bytes) -> tuple[int, dict[str, Any] | None, str]:
        proc = await asyncio.create_subprocess_exec(
            self.exe, "hook", "--scope", "claude", "--url", self.url, "--token", self.token,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await proc.communicate(stdin)
        assert proc.returncode is not None
        return proc.returncode, json.loads(out) if out.strip() else None, err.decode()


def _decision(out: dict[str, Any] | None) -> tuple[str, str]:
    assert out is not None
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "PreToolUse"
    return spec["permissionDecision"], spec["permissionDecisionReason"]


async def _last(srv: Served) -> tuple[str, str]:
    entry = (await srv.client.log("claude")).entries[-1]
    assert entry.effect is not None
    return entry.effect.kind, entry.effect.status


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, Path]:
    """The repository, and Claude Code's own clone of it (its project directory)."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "src/keep.txt": "keep\n"})
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    return repo, clone


@pytest.mark.slow
async def test_hooks_review_before_and_record_after(
    tmp_path: Path, checkout: tuple[Path, Path]
) -> None:
    """Write, Edit, MultiEdit and Bash are reviewed before they run (no opinion when no
    policy had one, or deny with the supervisor's reason; nothing written to the scope) and
    recorded after they ran; a refused one is rolled back in the checkout."""
    repo, root = checkout
    async with serve(tmp_path / "state", repo, policies=[no_rm]) as srv:
        c = srv.client
        alice = (await c.fork("root", "alice")).token
        assert (await c.with_token(alice).write("alice", "calc.py", ALICE.encode())).ok
        hook = Hook(srv, srv.url, (await c.fork("root", "claude")).token)

        # Write: reviewed as fs.write (allowed, not written), then recorded. No policy had
        # an opinion, so the hook says nothing: Claude Code's own permission prompt applies.
        code, out, _ = await hook(payload("pre_write", root))
        assert (code, out) == (0, None)
        assert await _last(srv) == ("fs.write", "allowed")
        with pytest.raises(FileNotFoundError):
            await c.read("claude", "notes.md")
        (root / "notes.md").write_text("# plan\n\n- power()\n")
        code, out, _ = await hook(payload("post_write", root))
        assert (code, out) == (0, None)
        assert await c.read("claude", "notes.md") == b"# plan\n\n- power()\n"
        assert await _last(srv) == ("fs.write", "materialized")

        # Edit where alice wrote: denied with the guard's reason.
        code, out, _ = await hook(payload("pre_edit_conflict", root))
        decision, reason = _decision(out)
        assert code == 0 and decision == "deny"
        assert "BLOCKED by the supervisor (conflict-guard)" in reason and "alice" in reason
        assert await _last(srv) == ("fs.patch", "blocked")

        # Edit elsewhere: allowed as an fs.patch, then recorded from the file on disk.
        code, out, _ = await hook(payload("pre_edit", root))
        assert (code, out) == (0, None)
        assert await _last(srv) == ("fs.patch", "allowed")
        edited = CALC.replace("A tiny calculator.", "A tiny calculator (add, power).")
        (root / "calc.py").write_text(edited)
        assert (await hook(payload("post_edit", root)))[:2] == (0, None)
        assert await c.read("claude", "calc.py") == edited.encode()

        code, out, _ = await hook(payload("pre_multiedit", root))
        assert (code, out) == (0, None)
        assert await _last(srv) == ("fs.patch", "allowed")

        # Bash: a site policy denies one command; another is allowed and its files recorded.
        code, out, _ = await hook(payload("pre_bash_denied", root))
        decision, reason = _decision(out)
        assert decision == "deny" and "recursive deletes are not allowed here" in reason
        assert await _last(srv) == ("exec", "blocked")
        code, out, _ = await hook(payload("pre_bash", root))
        assert (code, out) == (0, None)
        assert await _last(srv) == ("exec", "allowed")
        command = payload("pre_bash", root)["tool_input"]["command"]
        subprocess.run(["bash", "-c", command], cwd=root, check=True)
        assert (await hook(payload("post_bash", root)))[:2] == (0, None)
        assert await c.read("claude", "power.py") == b"def power(a, b):\n    return a ** b\n"

        # Tools that change nothing get no opinion.
        assert await hook(payload("pre_read", root)) == (0, None, "")

        # A change the supervisor refuses after the fact comes back as a PostToolUse block.
        assert (await c.with_token(alice).write("alice", "late.py", b"alice's\n")).ok
        (root / "late.py").write_text("claude's\n")
        late = payload("post_write", root)
        late["tool_input"] = {"file_path": str(root / "late.py"), "content": "claude's\n"}
        code, out, _ = await hook(late)
        assert code == 0 and out is not None and out["decision"] == "block"
        assert "late.py" in out["reason"] and "alice" in out["reason"]

        log = [e.effect for e in (await c.log("claude")).entries if e.effect]
        assert all(e.kind != "exec" or e.status in ("allowed", "blocked") for e in log)
    # The checkout is Claude Code's: the hook wrote to it only to roll back late.py.
    assert git(root, "status", "--porcelain").split() == [
        "M", "calc.py", "??", "notes.md", "??", "power.py"]


@pytest.mark.slow
async def test_hook_fails_closed_without_a_server(tmp_path: Path,
                                                  checkout: tuple[Path, Path]) -> None:
    """With no server to ask, a PreToolUse is denied (exit code 2, the reason on stderr) and
    a PostToolUse reports the failure (exit code 1)."""
    _, root = checkout
    hook = Hook(None, "http://127.0.0.1:9", "s.claude.x")
    code, out, err = await hook(payload("pre_write", root))
    assert code == 2 and out is None and "no decision from the supervisor" in err
    code, out, err = await hook(payload("post_write", root))
    assert code == 1 and "no decision from the supervisor" in err
    code, out, err = await hook.raw(b"not json")
    assert code == 2 and out is None and "bad input" in err


async def test_review_endpoint_records_without_materializing(
    tmp_path: Path, checkout: tuple[Path, Path]
) -> None:
    """POST /v1/scopes/{name}/review records the decision as an effect (a commit that
    changes no file) and is described in /openapi.json; a bad body is a 422."""
    from coordinator.client import ClientError

    repo, _ = checkout
    async with serve(tmp_path / "state", repo) as srv:
        c = srv.client
        await c.fork("root", "claude")
        head = (await c.scope("claude")).head
        r = await c.review("claude", delete={"path": "calc.py"})
        assert r.status == "allowed" and r.effect.kind == "fs.delete" and r.commit
        entry = await c.show(r.commit)
        assert entry.parents == [head] and entry.tree == (await c.show(head)).tree
        assert await c.read("claude", "calc.py") == CALC.encode()
        with pytest.raises(ClientError) as e:
            await c.request("POST", "/v1/scopes/claude/review",
                            json_body={"write": {"path": "a", "content_b64": ""},
                                       "delete": {"path": "a"}})
        assert e.value.status == 422
        doc = await c.request("GET", "/openapi.json")
        assert "post" in doc["paths"]["/v1/scopes/{name}/review"]
