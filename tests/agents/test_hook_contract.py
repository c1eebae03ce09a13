"""`corral hook` speaks Claude Code's hook contract to the letter: an `allow` only when a
policy allowed explicitly (it skips the user's own permission prompt), nothing at all when
no policy had an opinion, `deny` and `ask` with `hookEventName`, and a PostToolUse refusal
rolled back in the checkout. Real payloads (hook_payloads/), the real command, a real server."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from coordinator import Decision, FsWrite, Intent, View, allow, block, rewrite
from tests.agents._helpers import CALC
from tests.agents.test_hooks import Hook, checkout, payload  # noqa: F401 - a fixture
from tests.coordinator.server_fixtures import serve


async def site(intent: Intent, view: View) -> Decision | None:
    """docs/ is allowed outright, secret/ refused, style/ wanted differently."""
    path = getattr(intent, "path", "")
    if path.startswith("docs/"):
        return allow("docs are always welcome")
    if path.startswith("secret/"):
        return block("no secrets in this repository")
    if path.startswith("style/") and isinstance(intent, FsWrite):
        return rewrite(intent, "use the house style")
    return None


def write_event(root: Path, rel: str, content: str = "x\n") -> dict[str, Any]:
    event = payload("pre_write", root)
    event["tool_input"] = {"file_path": str(root / rel), "content": content}
    return event


def pre(out: dict[str, Any] | None) -> tuple[str, str]:
    assert out is not None and set(out) == {"hookSpecificOutput"}, out
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "PreToolUse"
    return spec["permissionDecision"], spec["permissionDecisionReason"]


@pytest.mark.slow
async def test_pre_tool_use_answers_only_what_a_policy_decided(
        tmp_path: Path, checkout: tuple[Path, Path]) -> None:  # noqa: F811
    """No opinion (the guard and the site policy abstain): empty stdout, exit 0, so Claude
    Code's own permission prompt applies; an explicit allow is `allow` naming the policy;
    a block is `deny` with the reason; a rewrite is `ask` with the supervisor's wish."""
    repo, root = checkout
    async with serve(tmp_path / "state", repo, policies=[site]) as srv:
        hook = Hook(srv, srv.url, (await srv.client.fork("root", "claude")).token)

        assert await hook(payload("pre_write", root)) == (0, None, "")
        assert await hook(payload("pre_bash", root)) == (0, None, "")

        code, out, _ = await hook(write_event(root, "docs/notes.md"))
        decision, reason = pre(out)
        assert (code, decision) == (0, "allow")
        assert "site" in reason and "docs are always welcome" in reason

        code, out, _ = await hook(write_event(root, "secret/key"))
        decision, reason = pre(out)
        assert (code, decision) == (0, "deny") and "no secrets in this repository" in reason

        code, out, _ = await hook(write_event(root, "style/a.css"))
        decision, reason = pre(out)
        assert (code, decision) == (0, "ask") and "use the house style" in reason


@pytest.mark.slow
async def test_a_refused_post_tool_use_is_rolled_back_in_the_checkout(
        tmp_path: Path, checkout: tuple[Path, Path]) -> None:  # noqa: F811
    """A change the supervisor refuses after the tool ran is undone in Claude Code's
    checkout (a new file removed, an edited one put back as the scope has it) and the
    answer is a PostToolUse `decision: block` with `hookEventName` saying so."""
    repo, root = checkout
    async with serve(tmp_path / "state", repo) as srv:
        c = srv.client
        alice = c.with_token((await c.fork("root", "alice")).token)
        hook = Hook(srv, srv.url, (await c.fork("root", "claude")).token)
        assert (await alice.write("alice", "late.py", b"alice's\n")).ok
        assert (await alice.write("alice", "calc.py", (CALC + "\n# alice\n").encode())).ok

        (root / "late.py").write_text("claude's\n")
        event = payload("post_write", root)
        event["tool_input"] = {"file_path": str(root / "late.py"), "content": "claude's\n"}
        code, out, _ = await hook(event)
        assert code == 0 and out is not None and out["decision"] == "block"
        assert out["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
        assert "late.py" in out["reason"] and "alice" in out["reason"]
        assert "rolled back" in out["reason"]
        assert not (root / "late.py").exists()

        (root / "calc.py").write_text(CALC + "\n# claude\n")
        event = payload("post_edit", root)
        code, out, _ = await hook(event)
        assert out is not None and out["decision"] == "block" and "rolled back" in out["reason"]
        assert (root / "calc.py").read_text() == CALC
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == ""
