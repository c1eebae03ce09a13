"""The trace repository and its handles: one bare git directory, its write-ahead
journal (the newest objects and ref moves, in memory until a checkpoint), a handle per
thread, and reading its objects. The base of `Trace` (see `_trace`)."""


from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import pygit2
from pygit2.enums import ObjectType

from ..records._errors import NotFound
from ._gitnames import entry
from ._journal import Journal, JournalBounds
from ._malloc import trim
from ._pygit2 import Handle

SCOPE_PREFIX = "refs/corral/scopes/"


ARCHIVE_PREFIX = "refs/corral/archive/"


FORK_PREFIX = "refs/corral/forks/"


"""A live scope's fork commit (its first), so reopening needs no walk of its branch."""


IGNORED_PREFIX = "refs/corral/ignored/"


"""A live scope's ignored files (matched by .gitignore, so in none of its
commits' trees): a ref to a tree of them, moved in the same journal append as
the effect that changed them, so reopening reads one tree, not the branch."""


SNAPSHOT_REF = "refs/corral/snapshot"


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


TREE_MODE = 0o040000


# path -> (blob hex id, git mode), or None for a deletion
TreeChanges = Mapping[str, tuple[str, int] | None]


_HEX = frozenset("0123456789abcdef")


def is_object_id(text: str) -> bool:
    """Whether `text` is a full git object id (40 lowercase hex digits)."""
    return len(text) == 40 and _HEX.issuperset(text)


_ENTRY = re.compile(rb"(\d+) ([^\0]*)\0(.{20})", re.S)


"""One entry of a raw git tree object: mode, name, raw object id."""


_ENTRY_SPAN = re.compile(rb"\d+ [^\0]*\0.{20}", re.S)


_TREE_MODES = frozenset((TREE_MODE, 0o100644, 0o100755, 0o120000, 0o160000))


_ENTRY_NAME = re.compile(rb"\d+ ([^\0]*)\0.{20}", re.S)


_PACKED_NAME = re.compile(r"^[0-9a-f]{40,64} (.+)$", re.M)


"""A ref line of packed-refs (not a comment, not a peeled `^` line): its name."""


class _Held(NamedTuple):
    """A thread's repository handle."""

    generation: int
    """Trace._generation when it was opened: stale once that moves on."""
    repo: pygit2.Repository
    loop: asyncio.AbstractEventLoop | None
    """The event loop its thread runs (None for worker threads)."""


OBJECT_CACHE_BYTES = 32 << 20


"""libgit2's cache of parsed objects, for all handles of the process (its
default, 256 MiB, filled with a long history's commits and trees and was never
given back: ~85 MB at 20k effects)."""


OPEN_PACKS = 64


"""Pack files libgit2 keeps open at once (least recently used closed first)."""


MAPPED_PACK_BYTES = 256 << 20


"""Pack data libgit2 keeps mapped at once (its default is 8 GiB)."""


def _tune_libgit2() -> None:
    """Process-wide libgit2 settings: bounded memory, and no re-hash of each object
    read. Every object reaches the trace hashed: by the journal as it takes it
    in (its id is the hash of its data; the log's records carry a CRC32 each,
    and a pack entry its own), and a pack's inflate checks its stream's
    checksum; re-hashing on every read cost ~0.5 ms per 100 KB blob (a diff, a
    merge or a read of a source file)."""
    pygit2.settings.enable_strict_hash_verification(False)
    pygit2.settings.cache_max_size(OBJECT_CACHE_BYTES)
    pygit2.settings.mwindow_file_limit = OPEN_PACKS
    pygit2.settings.mwindow_mapped_limit = MAPPED_PACK_BYTES


class TraceObjects:
    """The repository, its journal and handles, and reading objects."""

    def __init__(
        self,
        path: Path,
        *,
        author: str = "corral",
        clock: Callable[[], float] | None = None,
        writable: bool = True,
        journal: JournalBounds | None = None,
    ) -> None:
        """`writable` is for the one process that owns the trace (the coordinator,
        holding the state lock); others open it read-only and see the same
        history, the journal's not-yet-checkpointed part included. `journal`:
        when it checkpoints and how much it may hold (default JournalBounds())."""
        self.path = path
        _tune_libgit2()
        self._handles: dict[int, _Held] = {}
        """Each thread's repository handle, by thread id (see `renew_handle`)."""
        self._idle: set[int] = set()
        """Threads between units of work (see `idle`): their handles may be
        dropped from another thread."""
        self._idle_lock = threading.Lock()
        self._generation = 0
        self._clock = clock  # epoch seconds for commit times; None = the wall clock
        if not author or author != author.strip() or any(c in author for c in "<>\n\0"):
            raise ValueError(f"invalid author name for the trace's commits: {author!r}")
        self._author = author
        if not (path / "HEAD").exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            repo = pygit2.init_repository(str(path), bare=True)
            # Blobs referenced only from effect records (payloads, blocked writes)
            # are unreachable by design: never let gc prune them.
            repo.config["gc.auto"] = 0
            repo.config["gc.pruneExpire"] = "never"
            repo.config["core.logAllRefUpdates"] = True
        self._packed_cache: tuple[tuple[int, int, int], list[str]] | None = None
        self._trees: dict[str, str] = {}
        """Commit id -> tree id of the commits written since the last checkpoint."""
        self.journal = Journal(path, writable=writable, bounds=journal)
        self.journal.on_packed = self._renew_handles

    @property
    def repo(self) -> pygit2.Repository:
        """This thread's repository handle (the same one until `renew_handle`)."""
        ident = threading.get_ident()
        held = self._handles.get(ident)
        if held is None:
            repo = Handle(str(self.path))
            # The journal's objects first, then the packs and loose objects on disk.
            objects = str(self.path / "objects")
            odb = pygit2.Odb()
            odb.add_backend(self.journal.backend(), 1000)
            odb.add_backend(pygit2.OdbBackendPack(objects), 2)
            odb.add_backend(pygit2.OdbBackendLoose(objects, -1, False), 1)
            repo.set_odb(odb)
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            held = self._handles[ident] = _Held(self._generation, repo, loop)
        return held.repo

    def renew_handle(self) -> None:
        """Call where this thread holds no pygit2 object (the start of a unit of
        work): if a checkpoint wrote a pack (or a roll-up replaced packs) since
        this thread's handle was opened, drop it. The next one starts with an
        empty cache and no pack mapped or open (libgit2 keeps a deleted pack's
        file open while a handle that read it lives); objects of two handles
        must not meet, hence only here."""
        ident = threading.get_ident()
        if self._idle:
            with self._idle_lock:  # from here on, nobody else drops our handle
                self._idle.discard(ident)
        held = self._handles.get(ident)
        if held is not None and held.generation != self._generation:
            del self._handles[ident]
            del held  # the last reference: the handle is freed before the trim
            trim()  # what that handle held goes back to the kernel, not the heap

    def idle(self) -> None:
        """Call where this thread's unit of work ends (an io job): it holds no
        git object until its next `renew_handle`, so a checkpoint may drop its
        handle at once rather than leave what it cached to its next job."""
        with self._idle_lock:
            self._idle.add(threading.get_ident())

    def release_handle(self) -> None:
        """This thread is done with the trace (it may never run again): drop its
        handle."""
        self._handles.pop(threading.get_ident(), None)

    def _renew_handles(self) -> None:
        """A checkpoint wrote a pack: every handle is stale from now on, so what
        they cached is given back rather than growing with the history. A
        thread running an event loop renews its handle from a callback (between
        callbacks it holds no git object, as at the start of an effect), so an
        idle coordinator does not keep it; an io thread's is dropped at once
        when it is between jobs (`idle`), else at its next job; handles of
        threads that are gone are dropped at once."""
        self._generation += 1
        self._trees = {}  # what a checkpoint packed is looked up again
        alive = {t.ident for t in threading.enumerate()}
        with self._idle_lock:
            self._idle &= alive
            for ident in self._idle:
                self._handles.pop(ident, None)
        for ident, loop in [(i, h.loop) for i, h in self._handles.items()]:
            if ident not in alive:
                self._handles.pop(ident, None)
            elif loop is not None:
                try:
                    loop.call_soon_threadsafe(self.renew_handle)
                except RuntimeError:  # that loop is closed: nothing runs on it
                    self._handles.pop(ident, None)
        trim()  # the sealed generations and the dropped handles (no reference left here)

    def start(self) -> None:
        """Checkpoint the journal in the background from now on."""
        self.journal.start()

    def checkpoint(self) -> None:
        """Bring the git repository on disk up to date (for plain `git` readers)."""
        self.journal.checkpoint()

    def close(self) -> None:
        """Checkpoint what is left and stop the background checkpoints."""
        self.journal.close()

    def write_blob(self, data: bytes) -> str:
        return self.journal.write_blob(data)

    def blob(self, oid: str) -> bytes:
        held = self.journal.get(oid)
        if held is not None and held[0] == ObjectType.BLOB:
            # Not through libgit2, which copies the object twice and hashes it
            # again (strict verification): ~0.8 ms for a 100 KB file.
            return held[1]
        try:
            # One read: `repo[oid].read_raw()` reads (and inflates) the object twice.
            kind, data = self.repo.odb.read(oid)
        except (KeyError, ValueError) as e:
            raise NotFound(f"no blob {oid}", cause=e) from e
        if kind != ObjectType.BLOB:
            raise NotFound(f"{oid} is not a blob")
        return data

    def commit(self, rev: str) -> pygit2.Commit:
        """Resolve a commit id (full or abbreviated) or ref; raises NotFound."""
        held, target = self.journal.ref(rev)
        if held:  # a ref moved (or deleted) since the last checkpoint
            if target is None:
                raise NotFound(f"unknown commit {rev!r}")
            rev = target
        try:
            if is_object_id(rev):
                # A full id, as nearly every caller gives: a direct lookup. revparse
                # first tries it as a ref name (refs/<id>, refs/tags/<id>, ...),
                # ~0.15 ms of file system lookups per call.
                obj = self.repo.get(rev)
                if obj is not None:
                    return obj.peel(pygit2.Commit)
            return self.repo.revparse_single(rev).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError) as e:
            raise NotFound(f"unknown commit {rev!r}", cause=e) from e

    def tree(self, oid: str) -> pygit2.Tree:
        """The tree object with id `oid` (a commit id gives its tree)."""
        return self.repo[oid].peel(pygit2.Tree)

    def tree_of(self, commit: str) -> pygit2.Tree:
        return self.tree(self.commit_tree(commit))

    def commit_tree(self, commit: str) -> str:
        """The tree id of `commit` (an id, full or abbreviated, or a ref). The
        commits this trace wrote since its last checkpoint are remembered: each
        effect asks for its head's tree, and a commit lookup is ~0.1 ms."""
        tree = self._trees.get(commit)
        if tree is None:
            tree = str(self.commit(commit).tree_id)
        return tree

    def tree_id(self, rev: str) -> str:
        """The tree that `rev` names: a tree id as it is, a commit id (full or
        abbreviated) or ref as its commit's tree. Raises NotFound."""
        try:
            obj = self.repo[rev]
        except (KeyError, ValueError):
            obj = None
        if obj is not None and obj.type == ObjectType.TREE:
            return str(obj.id)
        return str(self.commit(rev).tree_id)

    def entry(self, tree: pygit2.Tree, path: str) -> pygit2.Object | None:
        return entry(tree, path)

    def read(self, rev: str, path: str) -> bytes:
        """The content of file `path` in `rev`: a commit (id or ref) or a tree id,
        such as `MergeResult.tree` of a dry run. Raises NotFound when `rev` is
        unknown or holds no file at `path`."""
        obj = self.entry(self.tree(self.tree_id(rev)), path)
        if obj is None or obj.type != ObjectType.BLOB:
            raise NotFound(f"no file {path!r} at {rev[:12]}")
        return obj.read_raw()
