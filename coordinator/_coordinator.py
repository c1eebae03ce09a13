"""The coordinator: one state directory, its trace, its scopes and its supervisor.

State directory layout::

    <state>/trace.git   the trace (bare git repository): the only durable truth
    <state>/ws/         workspace layers and mounts (rebuilt from the trace on open)
    <state>/lock        held while a coordinator has the directory open
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import sandboxes
from sandboxes import Backend, Change, Limits, SandboxError, Workspace, apply_changes

from ._effects import Effect
from ._errors import CorralError, SandboxFailure, ScopeExists, StateError, UnknownScope
from ._events import EventBus
from ._journal import JournalBounds
from ._live import LIVE_TIMEOUT_S, stop_live
from ._metrics import Metrics
from ._policy import Policy, PolicyChain
from ._scope import Scope
from ._trace import ARCHIVE_PREFIX, SCOPE_PREFIX, Trace

__all__ = ["Coordinator"]

log = logging.getLogger("corral")
T = TypeVar("T")

DEFER_TIMEOUT_S = 600.0
Settled = Literal["merged", "discarded", "gone", "timeout"]


def _memory_layers() -> bool:
    """Whether scopes' writable layers live in memory (tmpfs; the default) or on
    disk (CORRAL_LAYERS=disk). They are rebuilt from the trace after a crash
    anyway, and on disk every fork and discard pays ext4 directory creation
    (~0.4 ms each here); in memory, dirty files cost RAM instead."""
    value = os.environ.get("CORRAL_LAYERS", "memory")
    if value not in ("memory", "disk"):
        raise StateError(f"CORRAL_LAYERS must be 'memory' or 'disk', not {value!r}")
    return value == "memory"


class Coordinator:
    """Open with `async with Coordinator.open(state_dir, repo=..., base=...) as coord`."""

    def __init__(self, state: Path, trace: Trace, backend: Backend, chain: PolicyChain) -> None:
        self.state = state
        self.trace = trace
        self.backend = backend
        self.chain = chain
        self.events = EventBus()
        self.metrics = Metrics()
        self.scopes: dict[str, Scope] = {}
        self._pending: dict[str, Effect] = {}
        # pygit2, file copies and mount calls block: they run on these threads.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="corral-io")
        self._lockfile: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop the coordinator runs on: fuse workspaces hand it their decisions."""
        self._loop_thread: int | None = None
        """Its thread's kernel id: a fuse call from it must not wait for the loop."""
        self.live_timeout = LIVE_TIMEOUT_S
        """Seconds the policy chain has to decide on a live call in a fuse workspace
        before the call is denied (and the denial recorded)."""
        self.defer_timeout = DEFER_TIMEOUT_S
        """Seconds a deferred intent waits for the scope it waits on to merge
        (or be discarded) before it is blocked."""
        self.exec_limits = Limits()
        """What one command may use (processes, memory, output, file and layer
        size, the longest timeout); raise a field with dataclasses.replace."""
        self.toolchain: tuple[Path, ...] = ()
        """Host directories a command sees read-only (their bin/ first on its PATH):
        a virtualenv, a language toolchain. Nothing else of the host's is shown
        beyond the system directories."""
        self._settle_waiters: dict[str, list[asyncio.Future[Settled]]] = {}
        self._forking: set[str] = set()
        """Names claimed by forks in progress (see `_claim_name`)."""
        self.cursor_key = os.urandom(16)
        """Signs the log cursors the HTTP API hands out (valid while this runs)."""

    # -- lifecycle ----------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        state_dir: str | os.PathLike[str],
        repo: str | os.PathLike[str] | None = None,
        base: str = "HEAD",
        *,
        backend: str | None = None,
        policies: Sequence[Policy] = (),
        clock: Callable[[], float] | None = None,
        journal: JournalBounds | None = None,
    ) -> AsyncIterator[Coordinator]:
        """Open (or create) the coordinator state in `state_dir`.

        A new state directory needs `repo` (a local git repository) and imports
        commit `base` of it as the snapshot. An existing one is reopened: every
        scope's workspace is rebuilt from its head in the trace. `backend`
        picks the sandbox ("overlay", "copy", or "fuse" for live interception of
        writes by any process in a workspace; default: the best available, never fuse).
        `clock` (epoch seconds) makes commit ids reproducible. `journal`: when
        the trace checkpoints and how much it holds meanwhile (JournalBounds).

        Raises StateError when the directory is in use or was made from a
        different snapshot, NotFound for an unknown repository or commit.
        """
        coord = await asyncio.to_thread(
            cls._open_sync, Path(state_dir), repo, base, backend, policies, clock, journal
        )
        coord._loop = asyncio.get_running_loop()
        coord._loop_thread = threading.get_native_id()
        try:
            yield coord
        finally:
            await coord.close()

    @classmethod
    def _open_sync(
        cls,
        state: Path,
        repo: str | os.PathLike[str] | None,
        base: str,
        backend_name: str | None,
        policies: Sequence[Policy],
        clock: Callable[[], float] | None,
        journal: JournalBounds | None = None,
    ) -> Coordinator:
        state = state.absolute()
        state.mkdir(parents=True, exist_ok=True)
        lockfd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(lockfd)
            raise StateError(f"{state} is in use by another coordinator", cause=e) from e
        trace: Trace | None = None
        try:
            trace = Trace(state / "trace.git", clock=clock, journal=journal)
            snapshot = trace.snapshot()
            if snapshot is None:
                if repo is None:
                    raise StateError(f"{state} holds no snapshot yet: give the repository to "
                                     "snapshot (--repo on the command line, repo= in Python)")
                snapshot = trace.import_snapshot(Path(repo), base)
                trace.set_ref(SCOPE_PREFIX + "root", snapshot)
            elif repo is not None:
                wanted = Trace.resolve_external(Path(repo), base)
                if wanted != snapshot:
                    raise StateError(
                        f"{state} was created from snapshot {snapshot[:12]}, not {base} of "
                        f"{repo} ({wanted[:12]}); use another state directory"
                    )
            try:
                backend = sandboxes.choose_backend(
                    state / "ws", backend_name, tmpfs=_memory_layers()
                )
            except SandboxError as e:
                raise SandboxFailure(str(e), cause=e) from e
            coord = cls(state, trace, backend, PolicyChain(policies))
            coord._lockfile = lockfd
            coord.metrics.watch_journal(trace.journal)
            coord.metrics.watch_events(coord.events)
            coord._load_scopes(snapshot)
            trace.release_handle()  # this thread may never run again
            trace.start()
            return coord
        except BaseException:
            if trace is not None:
                trace.close()
            os.close(lockfd)
            raise

    def _load_scopes(self, snapshot: str) -> None:
        """Rebuild every live scope's workspace from its head in the trace. A
        scope's fork point and next seq come from its fork ref and its head's
        record, so this costs what the scopes changed, not their history."""
        trace = self.trace
        snap_tree = str(trace.commit(snapshot).tree_id)
        populate = partial(self._extract_tree, snap_tree)
        for name in trace.scope_names():
            head = trace.head(name)
            assert head is not None
            ws: Workspace = self.backend.base(snap_tree, populate, name=name)
            head_tree = str(trace.commit(head).tree_id)
            fork_point, parent, seq = self._lineage(name, head, snapshot)
            scope = Scope(self, name, ws, head, fork_point, parent, seq)
            if head_tree != snap_tree:
                scope._apply_tree_changes(trace.diff_trees(snap_tree, head_tree))
            # Ignored files are not in the tree: they come back from their own ref.
            kept = trace.ignored_files(name)
            if kept:
                apply_changes(ws.backing, [Change(path, trace.blob(blob), mode)
                                           for path, blob, mode in kept])
            self.scopes[name] = scope
        self.metrics.scope_count(self)

    def _lineage(self, name: str, head: str, snapshot: str) -> tuple[str, str | None, int]:
        """A live scope's fork point, parent scope and next seq."""
        trace = self.trace
        latest = trace.show(head).effect
        fork = trace.fork_point(name)
        if fork is not None and latest is not None and latest.scope == name:
            effect = trace.show(fork).effect
            assert effect is not None and effect.kind == "scope.fork"
            return fork, effect.intent.parent, latest.seq + 1  # type: ignore[union-attr]
        # No fork ref (root, or a trace from before they were kept): walk back.
        fork_point, parent, seq = snapshot, None, 0
        for entry in trace.walk(head):  # newest first
            eff = entry.effect
            assert eff is not None
            seq = max(seq, eff.seq + 1)
            if eff.kind == "scope.fork" and eff.scope == name:
                fork_point, parent = entry.commit, eff.intent.parent  # type: ignore[union-attr]
                break
        return fork_point, parent, seq

    def _extract_tree(self, tree: str, into: Path) -> None:
        """Write a tree's files into a directory (the base layer), with git's own
        archive writer: much faster than blob-by-blob for large checkouts."""
        archive = subprocess.Popen(
            ["git", "--git-dir", str(self.trace.path), "archive", "--format=tar", tree],
            stdout=subprocess.PIPE,
        )
        extract = subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout)
        assert archive.stdout is not None
        archive.stdout.close()
        if archive.wait() != 0 or extract.returncode != 0:
            raise StateError(f"could not extract tree {tree} into {into}")

    async def close(self) -> None:
        """Release every workspace and mount; the trace stays. Idempotent."""
        if self._lockfile is None:
            return
        await stop_live(self)
        self.events.close()
        try:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._pool, self.backend.close)
            finally:
                await loop.run_in_executor(self._pool, self.trace.close)
        finally:
            self._pool.shutdown(wait=True)
            os.close(self._lockfile)
            self._lockfile = None

    async def until_settled(self, name: str, timeout: float | None) -> Settled:
        """Wait until scope `name` is merged into another scope or discarded.
        Returns how it ended: "merged", "discarded", "gone" (no such scope:
        nothing to wait for) or "timeout"."""
        scope = self.scopes.get(name)
        if scope is None:
            return "gone"
        if scope.discarded:
            return "discarded"
        waiter: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
        self._settle_waiters.setdefault(name, []).append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return "timeout"
        finally:
            waiters = self._settle_waiters.get(name, [])
            if waiter in waiters:
                waiters.remove(waiter)

    @contextmanager
    def _claim_name(self, name: str) -> Iterator[None]:
        """Hold scope name `name` for a fork in progress (released when it ends;
        by then the scope is registered or the fork failed). Raises
        ScopeExists when a live scope or another fork has it. Synchronous, so
        the check and the claim are one step on the event loop."""
        live = self.scopes.get(name)
        if (live is not None and not live.discarded) or name in self._forking:
            raise ScopeExists(f"scope {name!r} already exists")
        self._forking.add(name)
        try:
            yield
        finally:
            self._forking.discard(name)

    def _forget(self, scope: Scope) -> None:
        """A discarded scope leaves the registry (and wakes who waits on it),
        unless live scopes were forked from it: they name it as their parent,
        so it stays until the last of them goes."""
        self._settled(scope.name, "discarded")
        gone: Scope | None = scope
        while gone is not None and gone.discarded and gone.name != "root":
            if self.scopes.get(gone.name) is not gone or any(
                s.parent == gone.name for s in self.scopes.values()
            ):
                break
            del self.scopes[gone.name]
            gone = self.scopes.get(gone.parent) if gone.parent is not None else None
        self.metrics.scope_count(self)

    def last_discard(self, name: str) -> str | None:
        """The commit of the latest discard of scope `name` that is no longer
        registered (None when there is none)."""
        prefix = f"{ARCHIVE_PREFIX}{name}-"
        numbered = [r for r in self.trace.refs(prefix) if r[len(prefix):].isdigit()]
        if not numbered:
            return None
        return self.trace.ref(max(numbered, key=lambda r: int(r[len(prefix):])))

    def _settled(self, name: str, how: Settled) -> None:
        """Scope `name` was merged somewhere or discarded: wake who waits on it."""
        for waiter in self._settle_waiters.pop(name, []):
            if not waiter.done():
                waiter.set_result(how)

    async def checkpoint(self) -> None:
        """Bring the trace's git repository on disk up to date now, for plain
        `git` readers (it is anyway every couple of seconds, and at close)."""
        await self.io(self.trace.checkpoint)

    # -- access -------------------------------------------------------------------

    @property
    def root(self) -> Scope:
        return self.scopes["root"]

    def scope(self, name: str) -> Scope:
        """The live scope `name`; raises UnknownScope."""
        scope = self.scopes.get(name)
        if scope is None or scope.discarded:
            raise UnknownScope(f"no scope named {name!r}")
        return scope

    def log(self, scope: Scope | str) -> list[Effect]:
        """The effects on a scope's branch, oldest first (blocking read of the trace)."""
        s = self.scope(scope) if isinstance(scope, str) else scope
        return [e.effect for e in self.trace.log(s.head) if e.effect is not None]

    async def io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (git, files, mounts) on the coordinator's threads."""
        if self._lockfile is None:
            raise CorralError("the coordinator is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._job, partial(fn, *args, **kwargs))

    def _job(self, fn: Callable[[], T]) -> T:
        self.trace.renew_handle()  # between jobs, an io thread holds no git object
        try:
            return fn()
        finally:
            self.trace.idle()
