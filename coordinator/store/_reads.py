"""Reading trace trees as plain values, for the layers above the store (which do not
import pygit2): a file's blob and mode, a directory's names, every file under a path,
a tree as the sandboxes' `BaseTree`, and the diff of two commits or two blobs."""

from __future__ import annotations

from dataclasses import dataclass

import pygit2

from ._gitnames import entry

__all__ = ["FileDiff", "HeadTree", "blob_id", "diff_blobs", "diff_commits", "file_at",
           "listdir", "read_file", "tree_leaves"]

_TREE = 0o040000


def blob_id(data: bytes) -> str:
    """The git blob id of `data` (what the trace would store it as)."""
    return str(pygit2.hash(data))


def file_at(tree: pygit2.Tree, path: str) -> tuple[str, int] | None:
    """(blob id, mode) of the file or symlink at `path` in `tree`; None when none."""
    e = entry(tree, path)
    return (str(e.id), e.filemode) if e is not None and e.filemode != _TREE else None


def read_file(tree: pygit2.Tree, path: str) -> bytes | None:
    """The content of the file at `path` in `tree`, or None (absent, or a directory)."""
    o = entry(tree, path) if path else None
    return o.read_raw() if o is not None and o.type == pygit2.enums.ObjectType.BLOB else None


def listdir(tree: pygit2.Tree, path: str) -> list[str]:
    """The names in directory `path` of `tree` ("" is the top); [] when not a directory."""
    o = tree if not path else entry(tree, path)
    return [e.name for e in o if e.name] if isinstance(o, pygit2.Tree) else []


def tree_leaves(tree: pygit2.Tree, top: str) -> list[tuple[str, tuple[str, int]]]:
    """(path, (blob id, mode)) of every file at or below `top` in `tree`."""
    obj = entry(tree, top)
    if obj is None:
        return []
    if obj.filemode != _TREE:
        return [(top, (str(obj.id), int(obj.filemode)))]
    out: list[tuple[str, tuple[str, int]]] = []
    stack: list[tuple[str, pygit2.Tree]] = [(top, obj.peel(pygit2.Tree))]
    while stack:
        prefix, sub = stack.pop()
        for e in sub:
            rel = f"{prefix}/{e.name}"
            if e.filemode == _TREE:
                stack.append((rel, e.peel(pygit2.Tree)))
            else:
                out.append((rel, (str(e.id), int(e.filemode))))
    return out


class HeadTree:
    """A trace tree as the sandboxes' BaseTree: what a run compares a changed
    file with, by blob id, instead of reading the workspace's old file.

    Each directory is listed once, by iterating its tree object: no path is
    handed to pygit2's lookups, which keep every name given (see _gitnames),
    and a command writing 100k files costs one listing, not 100k lookups.
    """

    def __init__(self, tree: pygit2.Tree) -> None:
        self._dirs: dict[str, dict[str, pygit2.Object] | None] = {"": _listing(tree)}

    def entry(self, path: str) -> tuple[int, str] | None:
        """(git mode, blob id) of the file or symlink at `path`; None when there is none."""
        parent, _, name = path.rpartition("/")
        found = self._dir(parent)
        obj = found.get(name) if found is not None else None
        if obj is None or obj.filemode == _TREE:
            return None
        return int(obj.filemode), str(obj.id)

    def _dir(self, rel: str) -> dict[str, pygit2.Object] | None:
        if rel in self._dirs:
            return self._dirs[rel]
        parent, _, name = rel.rpartition("/")
        above = self._dir(parent)
        obj = above.get(name) if above is not None else None
        listing = _listing(obj) if isinstance(obj, pygit2.Tree) else None
        self._dirs[rel] = listing
        return listing


def _listing(tree: pygit2.Tree) -> dict[str, pygit2.Object]:
    return {obj.name: obj for obj in tree if obj.name is not None}


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One file's change between two trees (or two blobs), with its unified diff."""

    path: str
    status: str
    """added, deleted, modified, renamed or typechange."""
    old_blob: str | None
    new_blob: str | None
    binary: bool
    additions: int
    deletions: int
    text: str


_STATUS = {
    pygit2.enums.DeltaStatus.ADDED: "added", pygit2.enums.DeltaStatus.DELETED: "deleted",
    pygit2.enums.DeltaStatus.MODIFIED: "modified", pygit2.enums.DeltaStatus.RENAMED: "renamed",
    pygit2.enums.DeltaStatus.TYPECHANGE: "typechange",
}
_NO_BLOB = b"\0" * 20


def diff_commits(new: pygit2.Commit, old: pygit2.Commit | None) -> list[FileDiff]:
    """The files `new` changed against `old` (None: against the empty tree)."""
    # swap: the diff reads from `old` to `new`
    diff = (new.tree.diff_to_tree(old.tree, swap=True) if old is not None
            else new.tree.diff_to_tree(swap=True))
    files = []
    for patch in diff:
        if patch is None:
            continue
        d = patch.delta
        _, adds, dels = patch.line_stats
        files.append(FileDiff(
            path=d.new_file.path or d.old_file.path, status=_STATUS.get(d.status, "modified"),
            old_blob=None if d.old_file.id.raw == _NO_BLOB else str(d.old_file.id),
            new_blob=None if d.new_file.id.raw == _NO_BLOB else str(d.new_file.id),
            binary=bool(d.is_binary), additions=adds, deletions=dels, text=patch.text or ""))
    return files


def diff_blobs(old: bytes | None, new: bytes | None, path: str) -> tuple[str, int, int, bool]:
    """(unified diff, lines added, lines deleted, binary) from `old` to `new` at `path`
    (None: the file is absent on that side)."""
    patch = pygit2.Patch.create_from(old, new, old_as_path=path, new_as_path=path)
    _, adds, dels = patch.line_stats
    return patch.text or "", adds, dels, bool(patch.delta.is_binary)
