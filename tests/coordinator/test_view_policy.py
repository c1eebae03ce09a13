"""A policy written outside the package sees what the built-in guard sees, through
public names only; world actions get one frozen input and may ask for a second review."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator import (
    ActInput,
    Coordinator,
    Decision,
    Exec,
    ExecOutcome,
    FileChange,
    FsWrite,
    Intent,
    NoOutcome,
    Refused,
    ToolCall,
    ToolOutcome,
    View,
    block,
)


class SameFileGuard:
    """Blocks a write of a file a sibling changed differently since their merge base:
    the conflict guard's question, asked with the public View only."""

    name = "same-file"

    def __init__(self) -> None:
        self.looked_at: list[tuple[str, frozenset[str]]] = []

    async def __call__(self, intent: Intent, view: View) -> Decision | None:
        if not isinstance(intent, FsWrite):
            return None
        me = view.head(view.scope)
        for sib in view.siblings():
            touched = await view.touched(sib)
            self.looked_at.append((sib.name, touched))
            if intent.path not in touched:
                continue

            def theirs(trace=view.trace, head=sib.head, path=intent.path):
                base = trace.merge_base(me, head)
                old = trace.entry(trace.tree_of(base), path) if base else None
                new = trace.entry(trace.tree_of(head), path)
                return (str(old.id) if old else None), (str(new.id) if new else None)

            base_blob, their_blob = await view.io(theirs)
            if their_blob not in (base_blob, intent.blob):
                their_text = await view.blob(their_blob) if their_blob else b""
                mine = await view.read(view.scope, intent.path)
                return block(f"{intent.path} was changed by {sib.name} "
                             f"({their_text!r}; here {mine!r})")
        return None


async def test_an_outside_policy_can_do_what_the_conflict_guard_does(tmp_path, sample_repo):
    """A policy in this file lists siblings with their heads and touched paths, reads
    the trace on the coordinator's threads, and blocks a conflicting write; after a
    merge (touched paths unknown to the scope) it gets them from the trees."""
    guard = SameFileGuard()
    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[guard]) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        assert (await a.write("shared.txt", b"from a\n")).ok
        r = await b.write("shared.txt", b"from b\n")
        assert r.blocked and "changed by a" in r.reason and "from a" in r.reason
        assert (await b.write("other.txt", b"fine\n")).ok
        # a merge leaves the scope's touched paths unknown: the view computes them
        c = await coord.root.fork("c")
        assert (await c.write("c.txt", b"c\n")).ok
        assert (await a.merge(c)).commit is not None
        assert a.touched is None
        r = await b.write("c.txt", b"not c\n")
        assert r.blocked and "changed by a" in r.reason
        assert ("a", frozenset({"shared.txt", "c.txt"})) in guard.looked_at
        assert a.touched == frozenset({"shared.txt", "c.txt"})  # remembered


async def test_record_commits_an_effect_without_a_world_action(tmp_path, sample_repo):
    """Scope.record puts the intent to the policy chain and commits the given outcome."""
    async def no_tools(intent: Intent, view: View) -> Decision | None:
        return block("no tools today") if isinstance(intent, ToolCall) and \
            intent.tool == "rm" else None

    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[no_tools]) as coord:
        a = await coord.root.fork("a")
        blob = await coord.io(coord.trace.write_blob, b"output")
        r = await a.record(ToolCall(tool="ls", arguments={}), ToolOutcome(result=blob))
        assert r.ok and r.outcome == ToolOutcome(result=blob) and r.commit == a.head
        r = await a.record(ToolCall(tool="rm", arguments={}), ToolOutcome(result=blob))
        assert r.blocked and r.reason == "no tools today"
        assert [e.status for e in coord.log(a)[1:]] == ["materialized", "blocked"]


async def test_a_world_action_gets_a_frozen_input_and_can_be_refused_on_second_review(
    tmp_path, sample_repo
):
    """The act receives the pending effect and the decided intent (frozen); its second
    review is the policy chain's, and a `Refused` answer records the effect blocked."""
    async def second_look(intent: Intent, view: View) -> Decision | None:
        if isinstance(intent, Exec) and intent.changes:
            return block("not those changes")
        return None

    seen: list[ActInput] = []

    async def act(given: ActInput):
        seen.append(given)
        with pytest.raises(dataclasses.FrozenInstanceError):
            given.intent = given.intent  # type: ignore[misc]
        changed = given.intent.model_copy(update={"changes": ()})
        assert (await given.review(changed)).allowed
        outcome = ExecOutcome(returncode=0, stdout=blob, stderr=blob, timed_out=False,
                              duration_s=0.0)
        changed = given.intent.model_copy(update={"changes": (
            FileChange(path="x.txt", blob=blob),)})
        decision = await given.review(changed)
        return Refused(decision, outcome, changed)

    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[second_look]) as coord:
        a = await coord.root.fork("a")
        blob = await coord.io(coord.trace.write_blob, b"")
        r = await a.perform(Exec(argv=("true",), timeout=10.0), act)
        assert r.blocked and r.reason == "not those changes"
        assert seen[0].pending.id == r.effect.id == "a#1" and seen[0].intent.argv == ("true",)
        assert r.effect.intent.changes[0].path == "x.txt"  # type: ignore[union-attr]
        assert r.commit == a.head


async def test_an_act_that_raises_is_recorded_failed_and_the_error_passes_through(
    tmp_path, sample_repo
):
    """Any exception of a world action (not only a CorralError) is recorded as a failed
    effect, then raised to the caller unchanged."""
    class Outage(Exception):
        pass

    async def act(_: ActInput) -> tuple[NoOutcome, dict]:
        raise Outage("the model is down")

    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        with pytest.raises(Outage):
            await a.perform(ToolCall(tool="ask", arguments={}), act)
        last = coord.log(a)[-1]
        assert (last.status, last.error) == ("failed", "the model is down")


async def test_a_view_among_a_group_lists_only_that_group(tmp_path, sample_repo):
    """`view.among(names)` lists only those scopes: the conflict guard run through it
    compares a write with its own group only, and a note made through it reaches the
    decision."""
    from coordinator import ConflictGuard

    guard = ConflictGuard()
    groups = {"a1": {"a1", "a2"}, "a2": {"a1", "a2"}, "b1": {"b1"}}
    seen: list[list[str]] = []

    async def grouped(intent: Intent, view: View) -> Decision | None:
        narrowed = view.among(groups[view.scope])
        seen.append(sorted(s.name for s in narrowed.siblings()))
        narrowed.note(f"group of {view.scope}")
        return await guard(intent, narrowed)

    async with Coordinator.open(tmp_path / "s", sample_repo, policies=[grouped]) as coord:
        a1, a2, b1 = [await coord.root.fork(n) for n in ("a1", "a2", "b1")]
        assert (await a1.write("README.md", b"a1's\n")).ok
        r = await b1.write("README.md", b"b1's\n")  # another group: not compared
        assert r.ok and seen[-1] == []
        r = await a2.write("README.md", b"a2's\n")
        assert r.blocked and "a1" in r.reason and "group of a2" in r.reason
        assert seen[-1] == ["a1"]
