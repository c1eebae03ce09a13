"""Live writes: a fuse workspace's interceptor, connected to its scope's policy chain.

Any process working in a fuse scope's directory makes filesystem calls that the
FUSE layer hands to `LiveWrites` from libfuse's threads, blocking. Each mutating
call becomes an `fs.op` intent: it is published, decided by the policy chain on
the coordinator's event loop (`run_coroutine_threadsafe`) and waited for with a
time limit (`Runtime.live_timeout`). A denial, or no answer in time, is a
blocked effect in the trace and EACCES for the process; nothing was changed.

Allowed changes are recorded when complete: a file opened for writing becomes one
`fs.write` effect each time it is closed after a change (not one per write()),
any other call (unlink, rename, mkdir...) an `fs.op` effect whose outcome lists
the files it changed. Each names the decision's pending id (`<scope>#live-<n>`)
as its cause.

The coordinator's own reads and writes go to the workspace's backing tree, never
through FUSE, so they are neither asked nor recorded twice, and a policy that
reads the workspace through the scope or its view cannot wait on itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sandboxes import MutationIntent, Workspace, leaves, read_entry_beneath

from ..records._effects import Decision, Effect, FileChange, FsOp, FsOutcome, FsWrite, Intent
from ..records._events import Event
from ..store._ignore import split_ignored, store_ignored
from ..store._reads import blob_id, tree_leaves
from ._effect_path import EffectPath

if TYPE_CHECKING:
    from ..store._trace import TreeChanges

__all__ = ["LiveWrites", "attach_live", "stop_live"]

log = logging.getLogger("corral.live")
T = TypeVar("T")

GRACE_S = 2.0
"""Extra time a FUSE thread waits past the decision limit for the loop itself
(a loop blocked by synchronous work cannot even run the timer)."""

TIMEOUT_POLICY = "live-timeout"


class _Live(Protocol):
    live: LiveWrites | None


def attach_live(
    workspace: Workspace, path: EffectPath, is_gone: Callable[[], bool]
) -> LiveWrites | None:
    """Connect `workspace` to the policy chain through the scope's effect path
    when the backend intercepts writes; None when it does not. `is_gone` says
    whether the scope was discarded (nothing is recorded then)."""
    live = LiveWrites(workspace, path, is_gone)
    return live if workspace.intercept(live) else None


async def stop_live(scopes: Iterable[_Live]) -> None:
    """Deny further live calls in every scope and wait (bounded) for the decisions
    and records already under way."""
    lives = [s.live for s in scopes if s.live is not None]
    for live in lives:
        live.closing = True
    for live in lives:
        await live.drain()


class _Ticket:
    """One asked call, shared by the waiting FUSE thread and the deciding coroutine:
    whichever gives up or decides first fixes the answer."""

    __slots__ = ("abandoned", "decision", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.abandoned = False
        self.decision: Decision | None = None


def _timeout_decision(limit: float) -> Decision:
    return Decision(
        verdict="block", policy=TIMEOUT_POLICY,
        reason=f"the supervisor did not decide within {limit:g}s",
    )


class LiveWrites:
    """The `sandboxes.Interceptor` of one fuse scope (its methods run on FUSE threads)."""

    def __init__(self, workspace: Workspace, path: EffectPath, is_gone: Callable[[], bool]
                 ) -> None:
        self._backing: Path = workspace.backing
        self._path = path
        self._rt = path.rt
        self._is_gone = is_gone
        self._ids = itertools.count(1)
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._guard = threading.Lock()
        self._opened: dict[str, tuple[Decision, str]] = {}
        """Path -> (decision, pending id) of the last allowed open, for its close."""
        self._calls: dict[MutationIntent, tuple[Decision, str]] = {}
        self.closing = False

    # -- the interceptor (FUSE threads) -------------------------------------------

    def decide(self, intent: MutationIntent, /) -> str | None:
        """Ask the policy chain; None allows, a reason denies."""
        if self.closing:
            return "the coordinator is closing"
        if self._from_the_loop():
            # The loop itself is blocked in this call (a policy or a task writing
            # through scope.path): asking it would wait on itself until the
            # timeout. Refuse at once; nothing can be recorded from here either.
            log.error("%s %s through scope.path from the coordinator's own event loop "
                      "refused (it would wait on itself): write through the scope's "
                      "methods or workspace.backing", intent.op, intent.path)
            return ("a call through scope.path from the coordinator's own event loop "
                    "cannot be asked (it would wait on itself): use the scope's methods")
        limit = self._rt.live_timeout
        ticket = _Ticket()
        fsop = FsOp(op=intent.op, path=intent.path, target=intent.target)
        try:
            future = self._submit(self._ask(intent, fsop, ticket, limit))
        except RuntimeError as e:
            return f"the coordinator is not running ({e})"
        try:
            return future.result(limit + GRACE_S)  # type: ignore[no-any-return]
        except concurrent.futures.TimeoutError:
            with ticket.lock:
                decided = ticket.decision
                if decided is None:
                    ticket.abandoned = True  # the coroutine records the denial
            if decided is not None:  # decided in time; only the recording is slow
                return None if decided.verdict == "allow" else decided.reason or "blocked"
            log.warning("no decision on %s %s within %gs", intent.op, intent.path, limit)
            return _timeout_decision(limit).reason
        except Exception as e:
            log.exception("asking about %s %s failed", intent.op, intent.path)
            return f"the supervisor could not be asked: {e!r}"

    def _from_the_loop(self) -> bool:
        from sandboxes.fuse import caller_thread

        loop_thread = self._rt.loop_thread
        return loop_thread is not None and caller_thread() == loop_thread

    def done(self, intent: MutationIntent, /) -> None:
        """Record an allowed call other than a write open, now that it is complete."""
        with self._guard:
            decision, cause = self._calls.pop(intent, (None, None))
        fsop = FsOp(op=intent.op, path=intent.path, target=intent.target)
        paths = [intent.path] + ([intent.target] if intent.op == "rename" and intent.target
                                 else [])
        self._record_soon(self._commit(fsop, decision, cause, paths))

    def closed(self, path: str, /) -> None:
        """Record what a written file holds now that it was closed."""
        with self._guard:
            decision, cause = self._opened.pop(path, (None, None))
        self._record_soon(self._commit(None, decision, cause, [path]))

    # -- handing work to the loop ---------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        loop = self._rt.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError("no event loop")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        with self._guard:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._guard:
            self._futures.discard(future)

    def _record_soon(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a recording on the loop and wait for it, at most the decision limit (a
        scope busy with a long command must not hang the process's close())."""
        try:
            future = self._submit(coro)
        except RuntimeError:
            log.warning("a live change could not be recorded: the coordinator is not running")
            return
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(self._rt.live_timeout)

    async def drain(self, limit: float = 10.0) -> None:
        """Wait for every decision and recording under way (at most `limit` seconds)."""
        with self._guard:
            futures = [asyncio.wrap_future(f) for f in self._futures]
        if futures:
            await asyncio.wait(futures, timeout=limit)

    # -- on the loop ----------------------------------------------------------------

    async def _ask(
        self, intent: MutationIntent, fsop: FsOp, ticket: _Ticket, limit: float
    ) -> str | None:
        path, rt = self._path, self._rt
        pending = Effect(
            id=f"{path.name}#live-{next(self._ids)}", scope=path.name, seq=path.seq,
            parent=path.head, status="pending", intent=fsop,
        )
        rt.pending[pending.id] = pending
        rt.events.publish(Event("intent", pending))
        try:
            if ticket.abandoned:
                decision = _timeout_decision(limit)
            else:
                try:
                    decision = await asyncio.wait_for(path.ask(pending, fsop), limit)
                except TimeoutError:
                    decision = _timeout_decision(limit)
            if decision.verdict == "rewrite":
                decision = decision.model_copy(update={
                    "verdict": "block",
                    "reason": "a live call cannot be rewritten: " + (decision.reason or "denied"),
                })
            with ticket.lock:
                if ticket.abandoned:
                    decision = _timeout_decision(limit)
                ticket.decision = decision
            decided = pending.model_copy(update={"decision": decision})
            rt.events.publish(Event("decision", decided))
            rt.metrics.decision(fsop.kind, decision.verdict)
            if decision.verdict != "allow":
                await self._commit(fsop, decision, None, [], blocked=True)
                return decision.reason or f"blocked by {decision.policy}"
            with self._guard:
                if intent.op in ("open_write", "create", "truncate"):
                    self._opened[intent.path] = (decision, pending.id)
                else:
                    self._calls[intent] = (decision, pending.id)
            return None
        finally:
            rt.pending.pop(pending.id, None)

    async def _commit(
        self,
        fsop: FsOp | None,
        decision: Decision | None,
        cause: str | None,
        paths: list[str],
        *,
        blocked: bool = False,
    ) -> None:
        """Commit one effect: a blocked `fsop`, a completed `fsop` with the changes under
        `paths`, or (fsop None) an `fs.write` of the closed file `paths[0]`."""
        path, rt = self._path, self._rt
        async with path.lock:
            if self._is_gone() or not rt.open:
                return
            if blocked:
                changes: TreeChanges = {}
                intent: Intent | None = fsop
                outcome: FsOutcome | None = None
            else:
                tracked, ignored, kept = await rt.io(self._changes, paths)
                outcome = FsOutcome(changes=tuple(tracked), ignored=tuple(ignored),
                                    ignored_files=store_ignored(rt.trace, kept))
                changes = {c.path: (c.blob, c.mode) if c.blob else None for c in tracked}
                intent = fsop
                if fsop is None:
                    written = [c for c in tracked if c.path == paths[0] and c.blob]
                    if not written and paths[0] not in ignored:
                        return  # closed without a change: nothing to record
                    blob, mode = (written[0].blob, written[0].mode) if written else (
                        await rt.io(self._blob_of, paths[0]))
                    if blob is None:
                        return
                    intent = FsWrite(path=paths[0], blob=blob, mode=mode)
            assert intent is not None
            decision = decision or Decision(
                verdict="allow", policy="live", reason="through a file handle allowed earlier"
            )
            effect = path.next_effect(
                intent, cause=cause, status="blocked" if blocked else "materialized",
                decision=decision, outcome=outcome,
            )
            await path.commit(effect, changes)

    # -- reading the backing tree (coordinator threads) -----------------------------

    def _blob_of(self, path: str) -> tuple[str | None, int]:
        entry = read_entry_beneath(self._backing, path, self._rt.exec_limits.changed_bytes)
        if entry is None:
            return None, 0o100644
        return self._rt.trace.write_blob(entry[1]), entry[0]

    def _changes(
        self, paths: list[str]
    ) -> tuple[list[FileChange], list[str], list[FileChange]]:
        """The files under `paths` that differ between the scope's head tree and the
        backing tree, split into tracked changes and ignored paths, and the
        ignored files' changes (those outside `.git`: kept beside the tree)."""
        trace, root = self._rt.trace, self._backing
        head_commit = self._path.head
        head = trace.tree_of(head_commit)
        found: dict[str, FileChange] = {}
        for top in paths:
            if not top or top == ".":
                continue
            now = {rel: st for rel, st in leaves(root, top)}
            before = dict(tree_leaves(head, top))
            for rel in sorted(now.keys() | before.keys()):
                entry = (read_entry_beneath(root, rel, self._rt.exec_limits.changed_bytes)
                         if rel in now else None)
                old = before.get(rel)
                if entry is None:
                    if old is not None:
                        found[rel] = FileChange(path=rel, blob=None)
                    continue
                mode, data = entry
                if old is not None and old == (blob_id(data), mode):
                    continue
                found[rel] = FileChange(path=rel, blob=trace.write_blob(data), mode=mode)
        changes = [found[k] for k in sorted(found)]
        git_meta = [c for c in changes if c.path.split("/", 1)[0] == ".git"]
        tracked, ignored = split_ignored(trace, head_commit,
                                         [c for c in changes if c not in git_meta])
        return tracked, [c.path for c in (*ignored, *git_meta)], ignored
