"""The trace: a bare git repository holding the snapshot and every scope's history.

A scope is the ref `refs/corral/scopes/<name>`; a materialized (or blocked)
effect is a commit on it whose tree is the workspace after the effect and whose
message is a summary line, a blank line, and the effect record as JSON. Trees
are built incrementally from the parent's tree and the changed paths only.

pygit2 objects are not shared between threads: each thread opens its own
`Repository` on the same directory (libgit2 is safe used that way). New
objects and ref moves go through the journal (`_journal.py`): durable with one
append, moved into the repository as a pack at each checkpoint.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pygit2
from pygit2.enums import ObjectType

from ..records._effects import Effect, ScopeFork, ScopeRewind
from ..records._errors import NotFound, StateError
from ._gitnames import entry
from ._gitnames import name as gitname
from ._ignore import load_ignored
from ._journal import Journal, JournalBounds
from ._malloc import trim
from ._pygit2 import Handle

__all__ = [
    "ARCHIVE_PREFIX", "FORK_PREFIX", "IGNORED_PREFIX", "SCOPE_PREFIX", "LogPage", "Trace",
    "TraceEntry", "TreeChanges", "is_object_id",
]

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


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One commit of a scope's branch with its decoded effect (None for the snapshot)."""

    commit: str
    parents: tuple[str, ...]
    tree: str
    effect: Effect | None
    subject: str
    time: int = 0
    """The commit's time, epoch seconds (git keeps whole seconds): when the
    coordinator recorded the effect, by its clock."""


_HEX = frozenset("0123456789abcdef")


def is_object_id(text: str) -> bool:
    """Whether `text` is a full git object id (40 lowercase hex digits)."""
    return len(text) == 40 and _HEX.issuperset(text)


_ENTRY = re.compile(rb"(\d+) ([^\0]*)\0(.{20})", re.S)
"""One entry of a raw git tree object: mode, name, raw object id."""


def _changed_entries(
    old: bytes, new: bytes
) -> tuple[dict[str, tuple[bytes, int]], dict[str, tuple[bytes, int]]]:
    """The entries of two raw tree objects that are not byte-equal in both, as
    name -> (raw object id, mode). Equal entries are dropped before any is
    decoded: a one-file change costs two C-level splits of the directory."""
    a = set(_ENTRY_SPAN.findall(old))
    b = set(_ENTRY_SPAN.findall(new))
    return _decode(a - b), _decode(b - a)


_ENTRY_SPAN = re.compile(rb"\d+ [^\0]*\0.{20}", re.S)


def nest(changes: TreeChanges) -> dict[str, object]:
    """`changes` by directory: {name: change, or the nested changes below it}."""
    nested: dict[str, object] = {}
    for path, new in changes.items():
        parts = path.split("/")
        node = nested
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = new
    return nested


_TREE_MODES = frozenset((TREE_MODE, 0o100644, 0o100755, 0o120000, 0o160000))


def _entry_name(name: str) -> bytes:
    """`name` as a tree entry's bytes; ValueError for one git refuses."""
    raw = name.encode("utf-8", "surrogateescape")
    if raw in (b"", b".", b"..") or b"/" in raw or b"\0" in raw or raw.lower() == b".git":
        raise ValueError(f"invalid tree entry name {name!r}")
    return raw


def _tree_entry(name: bytes, mode: int, oid: bytes) -> bytes:
    if mode not in _TREE_MODES:
        raise ValueError(f"invalid mode {mode:o} for tree entry {name!r}")
    return b"%o %s\0%s" % (mode, name, oid)


_ENTRY_NAME = re.compile(rb"\d+ ([^\0]*)\0.{20}", re.S)


def _tree_entries(raw: bytes) -> dict[bytes, bytes]:
    """A raw tree object's entries, by name, in the tree's order: each entry's own
    bytes, kept as they are (an entry nobody changed is written back unchanged).
    Built by C-level scans: a 20k-entry directory is read in ~2 ms."""
    return dict(zip(_ENTRY_NAME.findall(raw), _ENTRY_SPAN.findall(raw), strict=True))


def _is_tree(entry: bytes) -> bool:
    return entry.startswith(b"40000 ")


def _tree_object(entries: dict[bytes, bytes], ordered: bool) -> bytes:
    """A tree object's content: its entries in git's order (a directory sorts
    as if its name ended with '/'); `ordered` when they already are."""
    if ordered:
        return b"".join(entries.values())
    return b"".join(entries[name] for name in sorted(
        entries, key=lambda name: name + b"/" if _is_tree(entries[name]) else name))


def _decode(entries: Iterable[bytes]) -> dict[str, tuple[bytes, int]]:
    out: dict[str, tuple[bytes, int]] = {}
    for raw in entries:
        m = _ENTRY.fullmatch(raw)
        assert m is not None
        out[m[2].decode("utf-8", "surrogateescape")] = (m[3], int(m[1], 8))
    return out


_PACKED_NAME = re.compile(r"^[0-9a-f]{40,64} (.+)$", re.M)
"""A ref line of packed-refs (not a comment, not a peeled `^` line): its name."""


class _Held(NamedTuple):
    """A thread's repository handle."""

    generation: int
    """Trace._generation when it was opened: stale once that moves on."""
    repo: pygit2.Repository
    loop: asyncio.AbstractEventLoop | None
    """The event loop its thread runs (None for worker threads)."""


class LogPage(NamedTuple):
    """One page of a branch's effects, newest first."""

    entries: list[TraceEntry]
    next: str | None
    """Pass as `before` to get the next (older) page; None on the last page."""


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


class Trace:
    """Thread-safe access to the trace repository at `path` (a bare git dir)."""

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

    # -- plumbing -------------------------------------------------------------

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

    # -- snapshot -------------------------------------------------------------

    @staticmethod
    def resolve_external(source: Path, rev: str) -> str:
        """The commit id `rev` names in the repository at `source`; raises NotFound."""
        try:
            src = pygit2.Repository(str(source))
        except pygit2.GitError as e:
            raise NotFound(f"{source} is not a git repository", cause=e) from e
        try:
            return str(src.revparse_single(rev).peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError) as e:
            raise NotFound(f"no commit {rev!r} in {source}", cause=e) from e

    def import_snapshot(self, source: Path, rev: str) -> str:
        """Copy commit `rev` of the repository at `source` (and its history) into
        the trace. Returns the commit id. Raises NotFound for an unknown rev."""
        sha = self.resolve_external(source, rev)
        if sha not in self.repo:
            # git's own transport copies exactly the needed objects, packed.
            proc = subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(self.path),
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    str(Path(source).resolve()),
                    sha,
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise StateError(f"could not import {rev} from {source}: {proc.stderr.strip()}")
        self.set_ref(SNAPSHOT_REF, sha)
        return sha

    def snapshot(self) -> str | None:
        return self.ref(SNAPSHOT_REF)

    # -- objects --------------------------------------------------------------

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

    # -- trees ----------------------------------------------------------------

    def build_tree(self, base: str | None, changes: TreeChanges) -> str:
        """The tree `base` with `changes` applied. Cost follows the changed paths:
        only the directories on their way are rewritten (as git tree objects
        written here, see `_tree_object`). Raises ValueError for an entry name or
        mode git cannot hold."""
        raw = self._base_tree(base) if base else None
        oid = self._build(raw, nest(changes))
        if oid is None:
            return self.journal.write_object(ObjectType.TREE, b"")
        return oid.hex()

    def _build(self, raw: bytes | None, nested: dict[str, object]) -> bytes | None:
        """The raw id of tree `raw` (its content; None: no tree) with `nested`
        applied, written; None when it ends up empty."""
        entries = _tree_entries(raw) if raw else {}
        # Still in git's order while entries are only replaced by ones of the same
        # kind (a file by a file, a tree by a tree) or removed: no sort then.
        ordered = True
        for name, new in nested.items():
            key = _entry_name(name)
            old = entries.get(key)
            if isinstance(new, dict):
                sub = self._raw_tree(old[-20:]) if old is not None and _is_tree(old) else None
                oid = self._build(sub, new)
                entry = None if oid is None else _tree_entry(key, TREE_MODE, oid)
            elif new is None:
                entry = None
            else:
                assert isinstance(new, tuple)
                entry = _tree_entry(key, new[1], bytes.fromhex(new[0]))
            if entry is None:
                entries.pop(key, None)
                continue
            if old is None or _is_tree(old) != _is_tree(entry):
                ordered = False
            entries[key] = entry
        if not entries:
            return None
        content = _tree_object(entries, ordered)
        return bytes.fromhex(self.journal.write_object(ObjectType.TREE, content))

    def diff_trees(self, old: str, new: str) -> dict[str, tuple[str, int] | None]:
        """Paths that differ from tree `old` to tree `new`: path -> (blob id, mode)
        in `new`, or None where `new` has no file there. No rename detection.

        Cost follows the change: subtrees with equal ids are skipped unread, so
        a one-file change in a 16k-file tree reads only the directories on its
        way (libgit2's tree diff walks every entry of both trees).
        """
        out: dict[str, tuple[str, int] | None] = {}
        if old != new:
            self._diff_walk(self.tree(old).id.raw, self.tree(new).id.raw, "", out)
        return out

    def _diff_walk(
        self, old: bytes | None, new: bytes | None, prefix: str,
        out: dict[str, tuple[str, int] | None],
    ) -> None:
        a, b = _changed_entries(
            self._raw_tree(old) if old is not None else b"",
            self._raw_tree(new) if new is not None else b"",
        )
        for name in sorted(a.keys() | b.keys()):
            was, now = a.get(name), b.get(name)
            if was == now:
                continue
            path = prefix + name
            was_dir = was is not None and was[1] == TREE_MODE
            now_dir = now is not None and now[1] == TREE_MODE
            if was_dir or now_dir:
                self._diff_walk(
                    was[0] if was_dir and was else None,
                    now[0] if now_dir and now else None,
                    path + "/",
                    out,
                )
            if now is not None and not now_dir:
                out[path] = (now[0].hex(), now[1])
            elif was is not None and not was_dir:
                out[path] = None

    def _base_tree(self, base: str) -> bytes:
        """The content of tree `base` (a tree id, as every effect gives, read once;
        or anything `tree` takes)."""
        if is_object_id(base):
            held = self.journal.get(base)
            kind, data = held if held is not None else self.repo.odb.read(base)
            if kind == ObjectType.TREE:
                return data
        return self._raw_tree(self.tree(base).id.raw)

    def _raw_tree(self, oid: bytes) -> bytes:
        kind, data = self.repo.odb.read(pygit2.Oid(raw=oid))
        if kind != ObjectType.TREE:
            raise NotFound(f"{oid.hex()} is not a tree")
        return data

    def tree_paths(self, tree: str) -> list[str]:
        """Every file path of `tree` (a tree or commit id, or a ref), sorted."""
        return sorted(p for p, _, _ in self.iter_files(self.tree_id(tree)))

    def iter_files(self, tree: str) -> Iterator[tuple[str, str, int]]:
        """Every file of a tree (a tree or commit id) as (path, blob id, mode)."""
        stack: list[tuple[str, pygit2.Tree]] = [("", self.tree(self.tree_id(tree)))]
        while stack:
            prefix, t = stack.pop()
            for e in t:
                p = prefix + str(e.name)
                if e.filemode == TREE_MODE:
                    stack.append((p + "/", self.tree(str(e.id))))
                elif e.filemode != 0o160000:  # submodules have no content here
                    yield p, str(e.id), e.filemode

    # -- commits and refs -----------------------------------------------------

    def commit_effect(
        self, effect: Effect, tree: str, parents: Iterable[str], *, ref: str | None = None
    ) -> str:
        """Write the commit for `effect` and move `ref` (default: the effect's
        scope) to it. Returns the commit id. The ref moves last: the effect is
        durable exactly when this returns."""
        message = f"{effect.summary()}\n\n{effect.model_dump_json()}\n"
        oid = self.write_commit(tree, parents, message)
        moves: dict[str, str | None] = {ref or SCOPE_PREFIX + effect.scope: oid}
        if effect.kind == "scope.fork" and ref is None:
            moves = {FORK_PREFIX + effect.scope: oid, **moves}
        if ref is None and effect.status == "materialized":
            moves = {**self._ignored_moves(effect), **moves}
        self.journal.move_refs(moves)
        return oid

    def write_commit(self, tree: str, parents: Iterable[str], message: str) -> str:
        """Write a commit of `tree` (author and committer: the trace's, now by its
        clock); returns its id. The object git's commit-tree would write, built
        here rather than by libgit2 (see `Journal.write_object`)."""
        when = int(self._clock()) if self._clock is not None else int(time.time())
        offset = 0 if self._clock is not None else time.localtime(when).tm_gmtoff // 60
        sign = "-" if offset < 0 else "+"
        who = f"{self._author} <corral@localhost> {when} {sign}{abs(offset) // 60:02d}" \
              f"{abs(offset) % 60:02d}"
        head = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents)
        text = f"{head}author {who}\ncommitter {who}\n\n{message}"
        oid = self.journal.write_object(ObjectType.COMMIT, text.encode())
        self._trees[oid] = tree
        return oid

    def _ignored_moves(self, effect: Effect) -> dict[str, str | None]:
        """How `effect` moves its scope's ignored-files ref: a write or command
        that touched ignored paths updates the tree; a fork starts from its
        parent's; a rewind drops what the rewound effects wrote (as the live
        rewind does). Costs what the effect changed."""
        name = IGNORED_PREFIX + effect.scope
        intent = effect.intent
        if isinstance(intent, ScopeFork):
            tree = self.ref(IGNORED_PREFIX + intent.parent)
            parent_head = self.head(intent.parent)
            if tree is not None and parent_head is not None and parent_head != intent.at:
                tree = self._drop(tree, self.ignored_since(parent_head, intent.at))
            return {name: tree} if tree is not None or self.ref(name) is not None else {}
        if isinstance(intent, ScopeRewind):
            tree = self.ref(name)
            if tree is None:
                return {}
            return {name: self._drop(tree, self.ignored_since(intent.head, intent.to))}
        # Every effect passes here: most touch no ignored file and must not pay a
        # ref lookup (a loose-ref stat when the journal does not hold it).
        changes = load_ignored(self, getattr(effect.outcome, "ignored_files", None))
        if not changes:
            return {}
        new = self.build_tree(self.ref(name), {c.path: (c.blob, c.mode) if c.blob else None
                                               for c in changes})
        return {name: None if new == EMPTY_TREE else new}

    def _drop(self, tree: str, paths: Iterable[str]) -> str | None:
        new = self.build_tree(tree, dict.fromkeys(paths))
        return None if new == EMPTY_TREE else new

    def ignored_files(self, scope: str) -> list[tuple[str, str, int]]:
        """The ignored files live scope `scope` holds beside its tree, as
        (path, blob id, mode): what a reopen puts back in its workspace."""
        tree = self.ref(IGNORED_PREFIX + scope)
        return list(self.iter_files(tree)) if tree is not None else []

    def ref(self, name: str) -> str | None:
        """The commit `name` points at (None when it does not exist)."""
        held, target = self.journal.ref(name)
        if held:
            return target
        ref = self.repo.references.get(gitname(name))
        return str(ref.target) if ref is not None else None

    def head(self, scope: str) -> str | None:
        return self.ref(SCOPE_PREFIX + scope)

    def set_ref(self, name: str, commit: str) -> None:
        self.journal.move_ref(name, commit)

    def delete_ref(self, name: str) -> None:
        """Delete a ref; a scope's ref takes its fork and ignored-files refs with it."""
        moves: dict[str, str | None] = {}
        if self.ref(name) is not None:
            moves[name] = None
        if name.startswith(SCOPE_PREFIX):
            for prefix in (FORK_PREFIX, IGNORED_PREFIX):
                side = prefix + name[len(SCOPE_PREFIX):]
                if self.ref(side) is not None:
                    moves[side] = None
        if moves:
            self.journal.move_refs(moves)

    def ref_name_free(self, name: str) -> bool:
        """Whether a ref `name` can be created: none by that name, none that is
        a directory of it (`a/b` when `a/b/c` exists) or that it is a directory
        of (`a/b/c` when `a/b` exists). Scope names may hold '-' and digits, so
        scope `x`'s third discard `archive/x-3` and scope `x-3`'s rewinds
        `archive/x-3/rewound-<n>` can meet; git refuses the second."""
        if self.ref(name) is not None:
            return False
        parts = name.split("/")
        for i in range(2, len(parts)):
            if self.ref("/".join(parts[:i])) is not None:
                return False
        below = name + "/"
        if (self.path / below).is_dir() and any((self.path / below).iterdir()):
            return False
        if any(r.startswith(below) and t is not None
               for r, t in self.journal.ref_moves().items()):
            return False
        packed = self._packed_refs()
        at = bisect.bisect_left(packed, below)
        return not (at < len(packed) and packed[at].startswith(below))

    def _packed_refs(self) -> list[str]:
        """The names in packed-refs, sorted. Parsed again only when the file was
        replaced (git and the checkpoint write it to a new file renamed into place):
        it holds every archived scope, so a run's discards would read it whole."""
        path = self.path / "packed-refs"
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._packed_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            text = path.read_text()
        except FileNotFoundError:
            return []
        names = _PACKED_NAME.findall(text)
        if not text.startswith("# pack-refs with:") or " sorted" not in text.partition("\n")[0]:
            names.sort()  # git's order is bytes', which UTF-8 keeps: str order
        self._packed_cache = (key, names)
        return names

    def fork_point(self, scope: str) -> str | None:
        """The fork commit of live scope `scope` (None for root, and for scopes
        forked before fork refs were kept)."""
        return self.ref(FORK_PREFIX + scope)

    def scope_names(self) -> list[str]:
        return [r[len(SCOPE_PREFIX) :] for r in self.refs(SCOPE_PREFIX)]

    def refs(self, prefix: str) -> list[str]:
        names = {r for r in self.repo.references if r.startswith(prefix)}
        for name, target in self.journal.ref_moves().items():
            if not name.startswith(prefix):
                continue
            if target is None:
                names.discard(name)
            else:
                names.add(name)
        return sorted(names)

    def entry_of(self, commit: pygit2.Commit) -> TraceEntry:
        message = commit.message
        subject, _, body = message.partition("\n\n")
        effect = None
        body = body.strip()
        if body.startswith("{"):
            try:
                effect = Effect.model_validate_json(body)
            except ValueError:
                effect = None
        if effect is None and "\n\n{" in message:
            # Records written before subjects were kept to one line: a path with
            # blank lines in it split the subject; the record is the JSON after it.
            at = message.find("\n\n{")
            while effect is None and at != -1:
                try:
                    effect = Effect.model_validate_json(message[at:].strip())
                    subject = message[:at].replace("\n", " ")
                except ValueError:
                    at = message.find("\n\n{", at + 1)
        return TraceEntry(
            commit=str(commit.id),
            parents=tuple(str(p) for p in commit.parent_ids),
            tree=str(commit.tree_id),
            effect=effect,
            subject=subject.strip(),
            time=commit.commit_time,
        )

    def show(self, rev: str) -> TraceEntry:
        """The commit `rev` with its effect record. Raises NotFound."""
        return self.entry_of(self.commit(rev))

    def _line(self, head: str) -> list[pygit2.Oid]:
        """The commits `walk(head)` yields, newest first, found without decoding
        their records: only a commit whose message could not hold one (nothing
        after a blank line holds a '{') ends the line here; from the snapshot
        commit on, where a line meets the user's own history, each record is
        decoded to tell, as `walk` does."""
        out: list[pygit2.Oid] = []
        snapshot = self.snapshot()
        snap = pygit2.Oid(hex=snapshot) if snapshot is not None else None
        exact = False
        commit = self.commit(head)
        while True:
            raw = commit.raw_message
            _, blank, body = raw.partition(b"\n\n")
            if not blank or b"{" not in body:
                return out
            exact = exact or commit.id == snap
            if exact and self.entry_of(commit).effect is None:
                return out
            out.append(commit.id)
            if not commit.parent_ids:
                return out
            commit = commit.parents[0]

    def stream(self, head: object) -> Iterator[TraceEntry]:
        """Effects on the first-parent line ending at `head` (a commit id, or a
        scope: its head), oldest first, each decoded as it is yielded. The line
        is found first without decoding a record (~6 µs a commit here); the records
        (the cost: parsing and validating their JSON) are read one by one as the
        caller asks, so the first arrives at once and nothing holds the whole
        branch. The caller may move between threads as it iterates: every step
        reads through the current thread's handle and holds no git object.

        A record above the snapshot that does not decode (a damaged commit, or
        a newer format) ends the stream there, as it ends `walk`; the older
        effects were yielded by then. Raises NotFound for an unknown `head`
        (from the first step: nothing is read before it).
        """
        line = self._line(str(getattr(head, "head", head)))
        for oid in reversed(line):
            commit = self.repo[oid]
            assert isinstance(commit, pygit2.Commit)
            entry = self.entry_of(commit)
            del commit  # no object of this thread's handle is held across the yield
            if entry.effect is None:
                return
            yield entry

    def walk(self, head: str) -> Iterator[TraceEntry]:
        """First-parent history from `head` back to (and excluding) the snapshot's
        own history: newest first, Corral commits only."""
        commit: pygit2.Commit | None = self.commit(head)
        while commit is not None:
            entry = self.entry_of(commit)
            if entry.effect is None:
                return
            yield entry
            commit = commit.parents[0] if commit.parent_ids else None

    def first_parents(self, head: str, stop: str) -> list[str]:
        """Commit ids from `head` back along first parents to `stop` (included),
        newest first, without decoding records (rewind's hot path)."""
        out: list[str] = []
        commit = self.commit(head)
        stop_oid = pygit2.Oid(hex=stop)
        while True:
            out.append(str(commit.id))
            if commit.id == stop_oid or not commit.parent_ids:
                return out
            commit = commit.parents[0]

    def ignored_since(self, head: str, stop: str) -> set[str]:
        """Ignored paths written by the effects after `stop` up to `head` (first
        parents): what a rewind to `stop` must delete besides the tree diff.
        Only records that list ignored paths are decoded."""
        out: set[str] = set()
        commit = self.commit(head)
        stop_oid = pygit2.Oid(hex=stop)
        while commit.id != stop_oid:
            if '"ignored":["' in commit.message:
                effect = self.entry_of(commit).effect
                outcome = effect.outcome if effect is not None else None
                out.update(getattr(outcome, "ignored", ()))
            if not commit.parent_ids:
                break
            commit = commit.parents[0]
        return out

    def log(self, head: object) -> list[TraceEntry]:
        """Effects on the first-parent line ending at `head` (a commit id, or a
        scope: its head), oldest first, as a list: each commit read once, newest
        first, and the list reversed. A caller that need not hold the branch
        reads it with `stream` (effects as they are decoded) or a page at a time
        with `log_page`."""
        return list(reversed(list(self.walk(str(getattr(head, "head", head))))))

    def log_page(self, head: object, *, limit: int = 50, before: str | None = None) -> LogPage:
        """Up to `limit` effects of the first-parent line ending at `head` (a
        commit id, or a scope: its head), newest first, starting at `head` or,
        given `before` (a previous page's `next`), just below that commit. Cost
        follows `limit`, not the length of the branch: `before` is taken as it
        is (whether it lies on `head`'s line would cost a walk to it; the
        HTTP route signs the cursors it hands out instead).

        Raises ValueError for a limit below 1, NotFound for an unknown commit.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        commit: pygit2.Commit | None
        if before is None:
            commit = self.commit(str(getattr(head, "head", head)))
        else:
            cursor = self.commit(before)
            commit = cursor.parents[0] if cursor.parent_ids else None
        entries: list[TraceEntry] = []
        while commit is not None and len(entries) < limit:
            entry = self.entry_of(commit)
            if entry.effect is None:
                return LogPage(entries, None)
            entries.append(entry)
            commit = commit.parents[0] if commit.parent_ids else None
        more = commit is not None and self.entry_of(commit).effect is not None
        return LogPage(entries, entries[-1].commit if more and entries else None)

    def last_writer(self, head: str, stop: str, path: str) -> str | None:
        """The effect commit that wrote `path` as it is at `head`, looking back
        to `stop` (excluded). Through a merge commit that took the path from its
        other parent, the search follows that parent: the writer is the agent's
        effect, not the merge."""
        commit = self.commit(head)
        stop_oid = pygit2.Oid(hex=stop)
        while commit.id != stop_oid and commit.parent_ids:
            here = self._path_id(commit.tree, path)
            parent = commit.parents[0]
            if here != self._path_id(parent.tree, path):
                for other in commit.parents[1:]:
                    if self._path_id(other.tree, path) == here:
                        commit = other
                        break
                else:
                    return str(commit.id)
                continue
            commit = parent
        return None

    @staticmethod
    def _path_id(tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
        obj = entry(tree, path)
        return obj.id if obj is not None else None

    def merge_base(self, a: str, b: str) -> str | None:
        oid = self.repo.merge_base(pygit2.Oid(hex=a), pygit2.Oid(hex=b))
        return str(oid) if oid is not None else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        if ancestor == descendant:
            return True
        return bool(self.repo.descendant_of(pygit2.Oid(hex=descendant), pygit2.Oid(hex=ancestor)))
