"""A scope: one agent's isolated, forkable workspace and its branch in the trace.

Every operation goes through one path: propose the intent (published to
observers), ask the policy chain, materialize in the workspace, commit to the
trace, move the ref, and only then return. The effects of one scope are
serialized by its lock; different scopes run concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sandboxes import Change, TreeTooDeep, Workspace, apply_changes, check_hidden, default_env

from ._effect_path import EffectPath, InThread, Result, _Blocked
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
    Message,
    NoOutcome,
    Outcome,
    ScopeDiscard,
    ScopeFork,
)
from ._errors import (
    CorralError,
    ExecError,
    NotFound,
    PatchError,
    PathError,
    RewindError,
    SandboxFailure,
    ScopeDiscarded,
)
from ._events import Event
from ._history import History
from ._ignore import IgnoreRules, store_ignored
from ._live import LiveWrites, attach_live
from ._patch import apply_patch, for_one_file, trace_blobs, workspace_files
from ._paths import check_path, check_scope_name, resolve_in
from ._policy import ScopeInfo
from ._trace import ARCHIVE_PREFIX, SCOPE_PREFIX, TreeChanges

if TYPE_CHECKING:
    from ._coordinator import Coordinator

__all__ = ["Scope"]

T = TypeVar("T")

_INLINE_BYTES = 64 * 1024
"""Blobs and file reads up to this size are done on the event loop's thread."""


class Scope(EffectPath, History):
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
        self.touched: frozenset[str] | None = frozenset() if head == fork_point else None
        """Paths changed on this branch since its fork point (a superset: a path
        changed back stays in), kept by the effect path; None when unknown."""
        self._seq = seq
        self._lock = asyncio.Lock()
        self._remounting: asyncio.Future[None] | None = None
        """Set while a fork freezes this workspace (unmount, move the upper,
        remount): reads wait for it, or they would find an empty directory."""
        self._thread_reads = 0
        self._reads_done: asyncio.Future[None] | None = None
        # The coordinator's own reads and writes go to `workspace.backing`; on a
        # backend that intercepts `path` (fuse), calls made there are asked here.
        self.live: LiveWrites | None = attach_live(self)

    def __repr__(self) -> str:
        return f"<Scope {self.name} at {self.head[:12]}{' discarded' if self.discarded else ''}>"

    @property
    def path(self) -> Path:
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

    async def read(self, path: str) -> bytes:
        """The current content of `path` in the workspace.

        Raises PathError for a bad path, FileNotFoundError when it does not exist.
        """
        self._check_live()
        await self._not_remounting()
        target = resolve_in(self.workspace.backing, path, follow_last=True)

        def read() -> bytes:
            if target.is_dir():
                raise IsADirectoryError(f"{path} is a directory")
            return target.read_bytes()

        try:
            small = target.stat().st_size <= _INLINE_BYTES
        except FileNotFoundError:
            small = True  # read() raises the same error with its path
        # A small file is read here: the page cache answers in microseconds,
        # cheaper than the round trip to a thread. No fork's remount can run
        # meanwhile: one only starts on this loop, after the check above.
        return read() if small else await self._read_in_thread(read)

    async def _not_remounting(self) -> None:
        while self._remounting is not None:
            await asyncio.shield(self._remounting)

    async def _read_in_thread(self, fn: Callable[[], T]) -> T:
        """Run a workspace read on a thread; a fork waits for it before it remounts."""
        self._thread_reads += 1
        try:
            return await self._coord.io(fn)
        finally:
            self._thread_reads -= 1
            if self._thread_reads == 0 and self._reads_done is not None:
                self._reads_done.set_result(None)
                self._reads_done = None

    async def _fork_workspace(self, name: str) -> Workspace:
        """`workspace.fork(name)`, with reads held off while it remounts."""
        loop = asyncio.get_running_loop()
        self._remounting = loop.create_future()
        try:
            while self._thread_reads:
                self._reads_done = self._reads_done or loop.create_future()
                await asyncio.shield(self._reads_done)
            return await self._coord.io(self.workspace.fork, name)
        finally:
            self._remounting.set_result(None)
            self._remounting = None

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
        await self._not_remounting()
        target = resolve_in(self.workspace.backing, path, follow_last=True) if path else None
        d = target or self.workspace.backing
        return await self._read_in_thread(lambda: sorted(p.name for p in d.iterdir()))

    # -- file effects -------------------------------------------------------------

    async def write(
        self, path: str, data: bytes, *, mode: int = 0o100644, cause: str | None = None
    ) -> Result:
        """Write `data` to `path` (creating directories). Returns the Result;
        raises PathError for a bad path."""
        path = self._writable(path)
        if mode not in (0o100644, 0o100755):
            raise PathError(f"mode {oct(mode)} is not a file mode (use 0o100644 or 0o100755)")
        data = bytes(data)
        trace = self._coord.trace
        # A small blob is quicker written here than the round trip to a thread.
        blob = (
            trace.write_blob(data) if len(data) <= _INLINE_BYTES
            else await self._coord.io(trace.write_blob, data)
        )
        return await self.perform(
            FsWrite(path=path, blob=blob, mode=mode),
            InThread(self._files_act, inline=len(data) <= _INLINE_BYTES),
            cause=cause,
        )

    async def patch(
        self,
        path_or_diff: str | bytes,
        diff: str | bytes | None = None,
        *,
        three_way: bool = False,
        cause: str | None = None,
    ) -> Result:
        """Apply a patch as `git apply` does: `patch(diff)` takes a whole
        `git diff` / `git format-patch` patch (many files, new, deleted and
        renamed files, modes, binary); `patch(path, diff)` a diff of one file,
        bare hunks included, which must name `path` if it names a file, applied
        as `git apply --unidiff-zero` does (hand-made hunks need not have
        context at both ends; line counts are honoured all the same).
        `three_way=True` falls back like `git apply --3way`. The patch is one
        intent listing every file it changes, and one commit.

        Raises PatchError (with git's reason) when the patch is malformed or
        does not apply, PathError when it would write a bad path.
        """
        self._check_live()
        if diff is None:
            path, text = None, path_or_diff
        else:
            path, text = self._writable(str(path_or_diff)), diff
        raw = text.encode() if isinstance(text, str) else bytes(text)
        if path is not None:
            raw = for_one_file(path, raw)
            if b"\n--- /dev/null" not in b"\n" + raw \
                    and workspace_files(self.workspace.backing)(path) is None:
                raise FileNotFoundError(f"no file {path!r} in scope {self.name!r}")
        async with self._lock:
            self._check_live()
            intent = await self._coord.io(self._patch_intent, raw, path is not None, three_way)
            size = sum(1 for c in intent.changes if c.blob is not None)
            act = InThread(self._files_act, inline=size <= 1 and len(raw) <= _INLINE_BYTES)
            return await self._perform(intent, act, cause=cause)

    def _patch_intent(self, raw: bytes, one_file: bool, three_way: bool) -> FsPatch:
        """The intent of patch `raw`: every file it changes, as git apply leaves
        them (blobs written). Raises PatchError when it does not apply."""
        trace = self._coord.trace
        files = apply_patch(raw, workspace_files(self.workspace.backing), three_way=three_way,
                            unidiff_zero=one_file, blob=trace_blobs(trace))
        if not files:
            raise PatchError("the patch changes nothing")
        changes = tuple(
            FileChange(path=self._writable(f.path),
                       blob=trace.write_blob(f.data) if f.data is not None else None,
                       mode=f.mode)
            for f in files
        )
        first = changes[0]
        return FsPatch(path=first.path, diff=trace.write_blob(raw), blob=first.blob,
                       mode=first.mode, changes=changes, three_way=three_way)

    async def delete(self, path: str, *, cause: str | None = None) -> Result:
        """Delete the file `path`. Raises FileNotFoundError when it does not exist."""
        path = self._writable(path)
        target = resolve_in(self.workspace.backing, path, follow_last=False)
        if not target.is_symlink() and not target.is_file():
            raise FileNotFoundError(f"no file {path!r} in scope {self.name!r}")
        return await self.perform(
            FsDelete(path=path), InThread(self._files_act, inline=True), cause=cause
        )

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
            case FsPatch() if intent.changes:
                # a rewrite may have replaced `path`'s content; deletions go first
                # (a file may give way to a directory of the same name)
                changes = sorted(
                    (FileChange(path=c.path, blob=intent.blob, mode=intent.mode)
                     if c.path == intent.path else c for c in intent.changes),
                    key=lambda c: c.blob is not None,
                )
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
        outcome = FsOutcome(changes=tuple(tracked), ignored=tuple(c.path for c in ignored),
                            ignored_files=store_ignored(trace, ignored))
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

    def exec_env(self) -> dict[str, str]:
        """The environment `exec` gives a command called without `env`: PATH from
        the coordinator's toolchain then the system's, HOME=/tmp, LANG, TMPDIR.
        Extend it rather than the caller's own environment."""
        return default_env(self._coord.toolchain)

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
            raise ExecError("argv must be a non-empty list of strings")
        limit = self._coord.exec_limits.timeout_max
        if not 0 < timeout <= limit:
            raise ExecError(f"timeout must be in (0, {limit:g}] seconds (the exec limit "
                            f"timeout_max), not {timeout}")
        if env is not None and any(not k or "=" in k or "\0" in k + v for k, v in env.items()):
            raise ExecError("env names must be non-empty, without '=' or NUL")
        try:
            check_hidden(self._coord.state, self._coord.toolchain)
        except ValueError as e:
            raise ExecError(str(e)) from e
        intent = Exec(argv=tuple(argv), timeout=float(timeout), network=network,
                      env=dict(env) if env is not None else None)
        return await self.perform(intent, self._act_exec, cause=cause)

    async def _act_exec(self, intent: Intent) -> tuple[Outcome, TreeChanges]:
        assert isinstance(intent, Exec)
        coord = self._coord
        trace = coord.trace
        try:
            # the env of the intent as decided: a policy may have rewritten it
            run = await coord.io(
                self.workspace.run,
                list(intent.argv),
                timeout=intent.timeout,
                env=intent.env,
                network=intent.network,
                limits=coord.exec_limits,
                toolchain=coord.toolchain,
            )
        except TreeTooDeep as e:
            # the command ran, but what it made cannot be recorded (nor even scanned)
            raise PathError(f"the command made a directory tree too deep to record, so "
                            f"none of its changes are applied: {e}", cause=e) from e
        except Exception as e:
            raise SandboxFailure(f"could not run {intent.argv[0]!r}: {e}", cause=e) from e

        def store() -> tuple[ExecOutcome, list[FileChange], list[FileChange]]:
            for c in run.changes:  # what git cannot record is not applied either
                try:
                    check_path(c.path)
                except PathError as e:
                    raise PathError(f"the command wrote a path that cannot be recorded, so "
                                    f"none of its changes are applied: {e}", cause=e) from e
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
                truncated=run.truncated,
                ignored_files=store_ignored(trace, ignored),
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
            outcome = outcome.model_copy(update={"review": decision})
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
        check_scope_name(name)
        # Claim the name before any await: two parents forking the same name at
        # once hold different scope locks, and only one of them may win.
        with coord._claim_name(name):
            return await self._fork(name, at)

    async def _fork(self, name: str, at: str | None) -> Scope:
        coord = self._coord
        async with self._lock:
            self._check_live()
            head = self.head
            if at is not None:
                at = str((await coord.io(coord.trace.commit, at)).id)
                if not await coord.io(coord.trace.is_ancestor, at, head):
                    raise RewindError(f"{at[:12]} is not in the history of scope {self.name!r}")
            with coord.metrics.timed("fork"):
                try:
                    ws = await self._fork_workspace(name)
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

    async def discard(self, *, cause: str | None = None) -> Result | None:
        """Archive this scope's branch (history kept under refs/corral/archive/)
        and release its workspace. Idempotent: None when already discarded."""
        coord = self._coord
        if self.name == "root":
            raise CorralError("the root scope cannot be discarded")
        async with self._lock:
            if self.discarded:
                return None
            # A ref lookup per probe (microseconds): no thread hop for it.
            archive = self._unique_ref(f"{ARCHIVE_PREFIX}{self.name}-")
            intent = ScopeDiscard(archive=archive)
            ref = SCOPE_PREFIX + self.name

            def release(commit: str) -> None:
                # The discard commit is already durable on the archive ref: only
                # now may the scope ref go, then the workspace.
                coord.trace.delete_ref(ref)
                with coord.metrics.timed("discard"):
                    self.workspace.discard()

            act = InThread(lambda _: (NoOutcome(), {}), ref=archive, after=release)
            result = await self._perform(intent, act, cause=cause)
            if not result.ok:
                return result
            self.discarded = True
            coord._forget(self)
            return result
