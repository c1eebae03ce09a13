"""A scope: one agent's isolated, forkable workspace and its branch in the trace.

Every operation goes through one path: propose the intent (published to
observers), ask the policy chain, materialize in the workspace, commit to the
trace, move the ref, and only then return. The effects of one scope are
serialized by its lock; different scopes run concurrently.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxes import Change, Workspace, apply_changes

from ._effects import (
    Decision,
    Effect,
    Exec,
    ExecOutcome,
    FileChange,
    FsDelete,
    FsOutcome,
    FsPatch,
    FsWrite,
    Intent,
    MergeOutcome,
    MergeStrategy,
    Message,
    NoOutcome,
    Outcome,
    ScopeDiscard,
    ScopeFork,
    ScopeMerge,
    ScopeRewind,
)
from ._errors import (
    CorralError,
    MergeError,
    NotFound,
    PathError,
    RewindError,
    SandboxFailure,
    ScopeDiscarded,
    ScopeExists,
)
from ._events import Event
from ._ignore import IgnoreRules
from ._live import LiveWrites, attach_live
from ._merge import MergeResult, Resolver, three_way
from ._patch import apply_unified_diff
from ._paths import check_path, resolve_in
from ._policy import ScopeInfo, View
from ._trace import ARCHIVE_PREFIX, SCOPE_PREFIX, TreeChanges

if TYPE_CHECKING:
    from ._coordinator import Coordinator

__all__ = ["Result", "Scope"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Result:
    """What became of one intent: its recorded effect and the trace commit."""

    effect: Effect
    commit: str | None

    @property
    def decision(self) -> Decision | None:
        return self.effect.decision

    @property
    def ok(self) -> bool:
        """True when the effect was materialized."""
        return self.effect.status == "materialized"

    @property
    def blocked(self) -> bool:
        return self.effect.status == "blocked"

    @property
    def reason(self) -> str:
        """The supervisor's reason for a blocked intent ('' otherwise)."""
        return self.effect.decision.reason if self.effect.decision else ""

    @property
    def outcome(self) -> Outcome | None:
        return self.effect.outcome


Act = Callable[[Intent], Awaitable[tuple[Outcome, TreeChanges]]]


@dataclass(frozen=True, slots=True)
class InThread:
    """An act that blocks (files, git): it runs on an io thread in the same hop
    as the commit that records it, so a write costs one thread hop, not two."""

    fn: Callable[[Intent], tuple[Outcome, TreeChanges]]


class _Blocked(Exception):
    """Raised inside an act when a second review (an exec's outcome) blocks."""

    def __init__(self, decision: Decision, outcome: Outcome, intent: Intent) -> None:
        self.decision, self.outcome, self.intent = decision, outcome, intent


class Scope:
    """One agent's scope. Create scopes with `Scope.fork`, never directly."""

    def __init__(
        self,
        coord: Coordinator,
        name: str,
        workspace: Workspace,
        head: str,
        fork_point: str,
        parent: str | None,
        seq: int,
    ) -> None:
        self._coord = coord
        self.name = name
        self.workspace = workspace
        self.head = head
        self.fork_point = fork_point
        """The first commit of this scope's branch: rewinds cannot go before it."""
        self.parent = parent
        self.discarded = False
        self.inbox: list[Message] = []
        self._seq = seq
        self._lock = asyncio.Lock()
        # The coordinator's own reads and writes go to `workspace.backing`; on a
        # backend that intercepts `path` (fuse), calls made there are asked here.
        self.live: LiveWrites | None = attach_live(self)

    def __repr__(self) -> str:
        return f"<Scope {self.name} at {self.head[:12]}{' discarded' if self.discarded else ''}>"

    @property
    def path(self):  # type: ignore[no-untyped-def]
        """The workspace directory (read it; write through the scope's methods)."""
        return self.workspace.path

    def info(self) -> ScopeInfo:
        return ScopeInfo(
            self.name, self.head, self.parent, self.fork_point, self._coord.backend.name
        )

    def _check_live(self) -> None:
        if self.discarded:
            raise ScopeDiscarded(f"scope {self.name!r} was discarded")

    # -- the one path -------------------------------------------------------------

    async def perform(
        self, intent: Intent, act: Act | InThread, *, cause: str | None = None
    ) -> Result:
        """Propose `intent`, let the policy chain decide, and if allowed run `act`
        (which carries it out and returns the outcome and tree changes), commit,
        and return. A blocked intent returns a Result whose `reason` says why."""
        async with self._lock:
            return await self._perform(intent, act, cause=cause)

    async def _perform(
        self,
        intent: Intent,
        act: Act | InThread,
        *,
        cause: str | None = None,
        parents: Sequence[str] | None = None,
        tree: str | None = None,
    ) -> Result:
        self._check_live()
        coord = self._coord
        pending = Effect(
            id=f"{self.name}#{self._seq}",
            scope=self.name,
            seq=self._seq,
            parent=self.head,
            cause=cause,
            status="pending",
            intent=intent,
        )
        self._seq += 1
        coord._pending[pending.id] = pending
        coord.events.publish(Event("intent", pending))
        try:
            decision = await self._decide(pending, intent)
            if not decision.allowed:
                return await self._record(
                    pending.model_copy(update={"status": "blocked", "decision": decision})
                )
            todo = decision.rewritten if decision.verdict == "rewrite" else intent
            assert todo is not None
            try:
                if isinstance(act, InThread):
                    return await self._act_and_record(pending, decision, todo, act, parents, tree)
                outcome, changes = await act(todo)
            except _Blocked as b:
                return await self._record(
                    pending.model_copy(
                        update={
                            "status": "blocked",
                            "decision": b.decision,
                            "outcome": b.outcome,
                            "intent": b.intent,
                        }
                    )
                )
            except CorralError as e:
                await self._record(
                    pending.model_copy(
                        update={"status": "failed", "decision": decision, "error": str(e)}
                    )
                )
                raise
            effect = pending.model_copy(
                update={"status": "materialized", "decision": decision, "outcome": outcome}
            )
            return await self._record(effect, changes, parents=parents, tree=tree)
        finally:
            coord._pending.pop(pending.id, None)

    async def _decide(self, pending: Effect, intent: Intent) -> Decision:
        coord = self._coord
        decision = await coord.chain.decide(intent, View(coord, pending))
        coord.events.publish(Event("decision", pending.model_copy(update={"decision": decision})))
        coord.metrics.decision(intent.kind, decision.verdict)
        return decision

    async def _act_and_record(
        self,
        pending: Effect,
        decision: Decision,
        todo: Intent,
        act: InThread,
        parents: Sequence[str] | None,
        tree: str | None,
    ) -> Result:
        trace = self._coord.trace
        head = self.head

        def work() -> tuple[Effect, str]:
            outcome, changes = act.fn(todo)
            effect = pending.model_copy(
                update={"status": "materialized", "decision": decision, "outcome": outcome}
            )
            t = tree or trace.build_tree(str(trace.commit(head).tree_id), changes)
            return effect, trace.commit_effect(
                effect, t, parents if parents is not None else [head]
            )

        effect, sha = await self._coord.io(work)
        self.head = sha
        self._coord.events.publish(Event("effect", effect, sha))
        return Result(effect, sha)

    async def _record(
        self,
        effect: Effect,
        changes: TreeChanges | None = None,
        *,
        parents: Sequence[str] | None = None,
        tree: str | None = None,
    ) -> Result:
        trace = self._coord.trace
        head = self.head

        def commit() -> str:
            t = tree or trace.build_tree(str(trace.commit(head).tree_id), changes or {})
            return trace.commit_effect(effect, t, parents if parents is not None else [head])

        sha = await self._coord.io(commit)
        self.head = sha
        self._coord.events.publish(Event("effect", effect, sha))
        return Result(effect, sha)

    # -- reading ------------------------------------------------------------------

    async def read(self, path: str) -> bytes:
        """The current content of `path` in the workspace.

        Raises PathError for a bad path, FileNotFoundError when it does not exist.
        """
        self._check_live()
        target = resolve_in(self.workspace.backing, path, follow_last=True)

        def read() -> bytes:
            if target.is_dir():
                raise IsADirectoryError(f"{path} is a directory")
            return target.read_bytes()

        return await self._coord.io(read)

    async def _read_committed(self, path: str) -> bytes | None:
        trace = self._coord.trace

        def read() -> bytes | None:
            try:
                return trace.read(self.head, check_path(path))
            except NotFound:
                return None

        return await self._coord.io(read)

    async def listdir(self, path: str = "") -> list[str]:
        """Names in a workspace directory (sorted); '' is the root."""
        self._check_live()
        target = resolve_in(self.workspace.backing, path, follow_last=True) if path else None
        d = target or self.workspace.backing
        return await self._coord.io(lambda: sorted(p.name for p in d.iterdir()))

    # -- file effects -------------------------------------------------------------

    async def write(
        self, path: str, data: bytes, *, mode: int = 0o100644, cause: str | None = None
    ) -> Result:
        """Write `data` to `path` (creating directories). Returns the Result;
        raises PathError for a bad path."""
        path = self._writable(path)
        if mode not in (0o100644, 0o100755):
            raise PathError(f"mode {oct(mode)} is not a file mode (use 0o100644 or 0o100755)")
        blob = await self._coord.io(self._coord.trace.write_blob, bytes(data))
        return await self.perform(
            FsWrite(path=path, blob=blob, mode=mode), InThread(self._files_act), cause=cause
        )

    async def patch(self, path: str, diff: str | bytes, *, cause: str | None = None) -> Result:
        """Apply unified-diff hunks to `path`. Raises PatchError when they do not apply,
        FileNotFoundError when the file does not exist."""
        path = self._writable(path)
        raw = diff.encode() if isinstance(diff, str) else bytes(diff)
        trace = self._coord.trace
        async with self._lock:
            self._check_live()
            current = await self.read(path)
            new = apply_unified_diff(current, raw, path)
            diff_blob, blob = await self._coord.io(
                lambda: (trace.write_blob(raw), trace.write_blob(new))
            )
            mode = await self._coord.io(self._mode_of, path)
            intent = FsPatch(path=path, diff=diff_blob, blob=blob, mode=mode)
            return await self._perform(intent, InThread(self._files_act), cause=cause)

    async def delete(self, path: str, *, cause: str | None = None) -> Result:
        """Delete the file `path`. Raises FileNotFoundError when it does not exist."""
        path = self._writable(path)
        target = resolve_in(self.workspace.backing, path, follow_last=False)
        if not target.is_symlink() and not target.is_file():
            raise FileNotFoundError(f"no file {path!r} in scope {self.name!r}")
        return await self.perform(FsDelete(path=path), InThread(self._files_act), cause=cause)

    def _writable(self, path: str) -> str:
        self._check_live()
        path = check_path(path)
        resolve_in(self.workspace.backing, path, follow_last=False)
        return path

    def _mode_of(self, path: str) -> int:
        target = resolve_in(self.workspace.backing, path, follow_last=False)
        return 0o100755 if target.stat().st_mode & 0o111 else 0o100644

    def _files_act(self, intent: Intent) -> tuple[Outcome, TreeChanges]:
        match intent:
            case FsWrite() | FsPatch():
                changes = [FileChange(path=intent.path, blob=intent.blob, mode=intent.mode)]
            case FsDelete():
                changes = [FileChange(path=intent.path, blob=None)]
            case _:
                raise CorralError(f"not a file intent: {intent.kind}")
        return self._materialize(changes)

    def _materialize(self, changes: Sequence[FileChange]) -> tuple[FsOutcome, TreeChanges]:
        """Write `changes` into the workspace; the tracked ones become tree changes."""
        trace = self._coord.trace
        for c in changes:  # re-check: a symlink could have appeared since the proposal
            resolve_in(self.workspace.backing, c.path, follow_last=False)
        try:
            apply_changes(
                self.workspace.backing,
                [Change(c.path, trace.blob(c.blob) if c.blob else None, c.mode) for c in changes],
            )
        except OSError as e:
            raise SandboxFailure(f"could not write to the workspace: {e}", cause=e) from e
        tracked, ignored = self._split_ignored(changes)
        outcome = FsOutcome(changes=tuple(tracked), ignored=tuple(c.path for c in ignored))
        return outcome, {c.path: (c.blob, c.mode) if c.blob else None for c in tracked}

    def _split_ignored(
        self, changes: Sequence[FileChange]
    ) -> tuple[list[FileChange], list[FileChange]]:
        trace = self._coord.trace
        rules = IgnoreRules(trace.repo, trace.commit(self.head).tree)
        tracked: list[FileChange] = []
        ignored: list[FileChange] = []
        for c in changes:
            (ignored if rules.ignored(c.path) else tracked).append(c)
        return tracked, ignored

    # -- commands -----------------------------------------------------------------

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 120.0,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        cause: str | None = None,
    ) -> Result:
        """Run a command transactionally: in a throwaway layer over the scope; the
        files it changed are reviewed by the policy chain (the intent again, with
        `changes` set) before they are copied into the scope and committed.

        Returns the Result; its outcome is an ExecOutcome (exit code, output blobs).
        """
        if not argv or not all(isinstance(a, str) for a in argv):
            raise CorralError("argv must be a non-empty list of strings")
        intent = Exec(argv=tuple(argv), timeout=float(timeout), network=network)
        return await self.perform(intent, lambda i: self._act_exec(i, env), cause=cause)

    async def _act_exec(
        self, intent: Intent, env: Mapping[str, str] | None
    ) -> tuple[Outcome, TreeChanges]:
        assert isinstance(intent, Exec)
        coord = self._coord
        trace = coord.trace
        try:
            run = await coord.io(
                self.workspace.run,
                list(intent.argv),
                timeout=intent.timeout,
                env=env,
                network=intent.network,
            )
        except Exception as e:
            raise SandboxFailure(f"could not run {intent.argv[0]!r}: {e}", cause=e) from e

        def store() -> tuple[ExecOutcome, list[FileChange], list[FileChange]]:
            files = [
                FileChange(
                    path=c.path,
                    blob=trace.write_blob(c.data) if c.data is not None else None,
                    mode=c.mode,
                )
                for c in run.changes
            ]
            tracked, ignored = self._split_ignored(files)
            outcome = ExecOutcome(
                returncode=run.returncode,
                stdout=trace.write_blob(run.stdout),
                stderr=trace.write_blob(run.stderr),
                timed_out=run.timed_out,
                duration_s=round(run.duration_s, 6),
                changes=tuple(tracked),
                ignored=tuple(c.path for c in ignored),
            )
            return outcome, tracked, files

        outcome, tracked, files = await coord.io(store)
        if files:
            # The second review: the command's file changes, before they land.
            reviewed = intent.model_copy(update={"changes": tuple(files)})
            pending = Effect(
                id=f"{self.name}#{self._seq - 1}",
                scope=self.name,
                seq=self._seq - 1,
                parent=self.head,
                status="pending",
                intent=reviewed,
            )
            decision = await self._decide(pending, reviewed)
            if not decision.allowed:
                raise _Blocked(decision, outcome, reviewed)
            await coord.io(lambda: apply_changes(self.workspace.backing, list(run.changes)))
        return outcome, {c.path: (c.blob, c.mode) if c.blob else None for c in tracked}

    # -- messages -----------------------------------------------------------------

    async def send(self, to: str, text: str, *, cause: str | None = None) -> Result:
        """Send a message to another scope's inbox (shown to its agent at its next step)."""
        target = self._coord.scope(to)

        async def deliver(intent: Intent) -> tuple[Outcome, TreeChanges]:
            assert isinstance(intent, Message)
            target.inbox.append(intent)
            return NoOutcome(), {}

        return await self.perform(Message(to=to, text=text, sender=self.name), deliver, cause=cause)

    def take_messages(self) -> list[Message]:
        """Messages received since the last call, oldest first."""
        messages, self.inbox = self.inbox, []
        return messages

    # -- scope operations ---------------------------------------------------------

    async def fork(self, name: str, *, at: str | None = None) -> Scope:
        """A child scope at this scope's head (or at `at`, an earlier commit of
        this scope's history), with a copy-on-write workspace.

        Raises ScopeExists when `name` is taken, PathError for a bad name,
        RewindError when `at` is not in this scope's history.
        """
        coord = self._coord
        if not _NAME.match(name) or name.endswith(".lock"):
            raise PathError(f"invalid scope name {name!r}: use letters, digits, '.', '_', '-'")
        async with self._lock:
            self._check_live()
            if name in coord.scopes and not coord.scopes[name].discarded:
                raise ScopeExists(f"scope {name!r} already exists")
            head = self.head
            if at is not None:
                at = str((await coord.io(coord.trace.commit, at)).id)
                if not await coord.io(coord.trace.is_ancestor, at, head):
                    raise RewindError(f"{at[:12]} is not in the history of scope {self.name!r}")
            with coord.metrics.timed("fork"):
                try:
                    ws = await coord.io(self.workspace.fork, name)
                except Exception as e:
                    raise SandboxFailure(f"could not fork {self.name!r}: {e}", cause=e) from e
                start = at or head
                intent = ScopeFork(
                    child=name, parent=self.name, at=start, backend=coord.backend.name
                )
                effect = Effect(
                    id=f"{name}#0",
                    scope=name,
                    seq=0,
                    parent=start,
                    status="materialized",
                    intent=intent,
                    decision=Decision(verdict="allow"),
                    outcome=NoOutcome(),
                )
                tree = await coord.io(lambda: str(coord.trace.commit(start).tree_id))
                sha = await coord.io(coord.trace.commit_effect, effect, tree, [start])
                child = Scope(coord, name, ws, sha, sha, self.name, 1)
                if start != head:
                    # The workspace forked at the parent's head: take it back to `at`.
                    await coord.io(child._rewind_workspace, head, start)
                coord.scopes[name] = child
                coord.events.publish(Event("effect", effect, sha))
                coord.metrics.scope_count(coord)
                return child

    async def rewind(
        self, to: str | None = None, *, steps: int | None = None, cause: str | None = None
    ) -> Result:
        """Move this scope back to an earlier commit of its branch: the workspace
        becomes exactly that commit's tree. Give `to` (a commit id) or `steps`
        (effects back along the branch).

        Raises RewindError for a target before the fork point or off the branch,
        NotFound for an unknown commit.
        """
        if (to is None) == (steps is None):
            raise RewindError("give exactly one of `to` or `steps`")
        if steps is not None and steps < 0:
            raise RewindError("steps must be >= 0")
        coord = self._coord
        trace = coord.trace
        async with self._lock:
            self._check_live()
            head = self.head

            def plan() -> tuple[str, str, str]:
                target = self._rewind_target(to, steps)
                archive = self._unique_ref(f"{ARCHIVE_PREFIX}{self.name}/rewound-")
                return target, archive, str(trace.commit(target).tree_id)

            target, archive, tree = await coord.io(plan)
            intent = ScopeRewind(to=target, head=head)

            def act(_: Intent) -> tuple[Outcome, TreeChanges]:
                with coord.metrics.timed("rewind"):
                    self._rewind_workspace(head, target)
                    trace.set_ref(archive, head)
                return NoOutcome(), {}

            return await self._perform(
                intent, InThread(act), cause=cause, parents=[target], tree=tree
            )

    def _rewind_target(self, to: str | None, steps: int | None) -> str:
        trace = self._coord.trace
        line = trace.first_parents(self.head, self.fork_point)  # newest first
        if steps is not None:
            if steps >= len(line):
                raise RewindError(
                    f"cannot rewind {steps} steps: scope {self.name!r} has only "
                    f"{len(line) - 1} effects since its fork point"
                )
            return line[steps]
        assert to is not None
        commit = str(trace.commit(to).id)
        if commit not in line:
            if trace.is_ancestor(commit, self.fork_point):
                raise RewindError(f"{to!r} is before the fork point of scope {self.name!r}")
            raise RewindError(f"{to!r} is not on the branch of scope {self.name!r}")
        return commit

    def _rewind_workspace(self, head: str, target: str) -> None:
        """Make the workspace equal tree(target): apply the tree diff, and drop
        ignored files written by the effects being rewound."""
        trace = self._coord.trace
        old_tree = str(trace.commit(head).tree_id)
        new_tree = str(trace.commit(target).tree_id)
        changes = trace.diff_trees(old_tree, new_tree)
        dropped: set[str] = set()
        for entry in trace.walk(head):
            if entry.commit == target:
                break
            out = entry.effect.outcome if entry.effect else None
            if isinstance(out, FsOutcome | ExecOutcome):
                dropped.update(out.ignored)
        self._apply_tree_changes(changes, extra_deletes=dropped)

    def _apply_tree_changes(
        self, changes: TreeChanges, extra_deletes: set[str] | frozenset[str] = frozenset()
    ) -> None:
        trace = self._coord.trace
        todo = [
            Change(p, trace.blob(v[0]) if v else None, v[1] if v else 0o100644)
            for p, v in changes.items()
        ]
        for p in sorted(extra_deletes - set(changes)):
            if (self.workspace.backing / p).exists() or (self.workspace.backing / p).is_symlink():
                todo.append(Change(p, None))
        apply_changes(self.workspace.backing, todo)

    def _unique_ref(self, prefix: str) -> str:
        # Probe names one by one: listing every ref grows with the trace's history.
        refs = self._coord.trace.repo.references
        n = self._seq
        while refs.get(f"{prefix}{n}") is not None:
            n += 1
        return f"{prefix}{n}"

    async def merge(
        self,
        other: Scope | str,
        *,
        strategy: MergeStrategy = "fail",
        dry_run: bool = False,
        resolver: Resolver | None = None,
        cause: str | None = None,
    ) -> MergeResult:
        """Three-way merge of `other`'s branch into this scope (merge base = their
        real merge base, usually the fork point), committed with two parents.

        Returns a MergeResult. With strategy "fail" and conflicts, nothing is
        merged and `.conflicts` says where, with each side's writing effect.
        `dry_run` computes the same result and writes nothing. Raises
        ScopeDiscarded when either scope is discarded.
        """
        coord = self._coord
        trace = coord.trace
        theirs = coord.scope(other) if isinstance(other, str) else other
        if theirs.discarded:
            raise ScopeDiscarded(f"cannot merge discarded scope {theirs.name!r}")
        if theirs is self:
            raise MergeError("cannot merge a scope into itself")
        if strategy not in ("fail", "ours", "theirs", "union"):
            raise MergeError(f"unknown merge strategy {strategy!r}")
        async with self._lock:
            self._check_live()
            ours_head, theirs_head = self.head, theirs.head
            base = await coord.io(trace.merge_base, ours_head, theirs_head)
            if base is None:
                raise MergeError(f"{self.name!r} and {theirs.name!r} share no history")
            with coord.metrics.timed("merge"):
                result = await coord.io(
                    three_way, trace, base, ours_head, theirs_head, strategy, resolver
                )
            coord.metrics.conflicts(len(result.conflicts))
            if dry_run:
                return MergeResult(
                    result.base, result.tree, result.conflicts, result.changes, None, True
                )
            conflicts = tuple(c.path for c in result.conflicts)
            intent = ScopeMerge(other=theirs.name, other_head=theirs_head, strategy=strategy)
            if result.tree is None:
                failed = Effect(
                    id=f"{self.name}#{self._seq}",
                    scope=self.name,
                    seq=self._seq,
                    parent=self.head,
                    cause=cause,
                    status="failed",
                    intent=intent,
                    outcome=MergeOutcome(base=base, conflicts=conflicts),
                    error=f"{len(conflicts)} conflicting path(s): {', '.join(conflicts)}",
                )
                self._seq += 1
                await self._record(failed)
                return result
            file_changes = tuple(
                FileChange(path=p, blob=v[0] if v else None, mode=v[1] if v else 0o100644)
                for p, v in sorted(result.changes.items())
            )

            async def act(_: Intent) -> tuple[Outcome, TreeChanges]:
                await coord.io(self._apply_tree_changes, result.changes)
                return MergeOutcome(base=base, conflicts=conflicts, changes=file_changes), {}

            done = await self._perform(
                intent, act, cause=cause, parents=[ours_head, theirs_head], tree=result.tree
            )
            if not done.ok:
                return MergeResult(result.base, None, result.conflicts, result.changes)
            return MergeResult(
                result.base, result.tree, result.conflicts, result.changes, done.commit
            )

    async def discard(self, *, cause: str | None = None) -> Result | None:
        """Archive this scope's branch (history kept under refs/corral/archive/)
        and release its workspace. Idempotent: None when already discarded."""
        coord = self._coord
        if self.name == "root":
            raise CorralError("the root scope cannot be discarded")
        async with self._lock:
            if self.discarded:
                return None
            archive = await coord.io(self._unique_ref, f"{ARCHIVE_PREFIX}{self.name}-")
            intent = ScopeDiscard(archive=archive)
            ref = SCOPE_PREFIX + self.name

            result = await self._perform(intent, InThread(lambda _: (NoOutcome(), {})), cause=cause)
            if not result.ok:
                return result
            self.discarded = True

            def release() -> None:
                trace = coord.trace
                trace.set_ref(archive, self.head)
                trace.delete_ref(ref)
                with coord.metrics.timed("discard"):
                    self.workspace.discard()

            await coord.io(release)
            coord.metrics.scope_count(coord)
            return result
