"""Where Corral goes past pygit2's public API: every such reach-in is in this module.

Two of them, each because the public API cannot do the job:

- `Handle`, a `Repository` whose collections (`branches`, `references`,
  `remotes`, `submodules`) hold it by a weak proxy. pygit2's hold it strongly,
  so every handle sat in a reference cycle and its caches (object cache, open
  packs, pack maps: up to ~85 MB after a long history) waited for the cycle
  collector. It overrides the private `Repository._common_init`.
- `merge_file`, libgit2's `git_merge_file_from_index` called through pygit2's
  cffi module (`pygit2.C`, `pygit2.ffi`, `IndexEntry._to_c`, `Repository._repo`):
  pygit2's `merge_file_from_index` takes neither a favor nor a marker style.

pyproject.toml pins pygit2 to the versions these were tested on;
tests/coordinator/test_pygit2_seam.py fails, naming what is missing, on a
pygit2 that renames or drops any of them.
"""

from __future__ import annotations

import weakref
from typing import Literal, NamedTuple

import pygit2
from pygit2 import C, ffi
from pygit2.branches import Branches
from pygit2.errors import check_error
from pygit2.references import References
from pygit2.remotes import RemoteCollection
from pygit2.submodules import SubmoduleCollection

__all__ = ["REACH_INS", "FileMerge", "Handle", "merge_file", "missing"]

Favor = Literal["fail", "ours", "theirs", "union"]

REACH_INS = (
    "Repository._common_init", "Repository._repo", "IndexEntry._to_c",
    "C.git_merge_file_from_index", "C.git_merge_file_result_free",
    "C.GIT_MERGE_FILE_FAVOR_NORMAL", "C.GIT_MERGE_FILE_FAVOR_OURS",
    "C.GIT_MERGE_FILE_FAVOR_THEIRS", "C.GIT_MERGE_FILE_FAVOR_UNION",
    "C.GIT_MERGE_FILE_STYLE_DIFF3", "C.GIT_MERGE_FILE_STYLE_MERGE",
)
"""The private names of pygit2 used here, as `Class.attr` or `C.name`."""


def missing() -> list[str]:
    """Those of `REACH_INS` this pygit2 lacks, and the cffi types it cannot build."""
    gone = []
    for name in REACH_INS:
        owner, _, attr = name.partition(".")
        holder = C if owner == "C" else getattr(pygit2, owner)
        if attr == "_repo":
            continue  # an instance attribute: checked on a real handle by the test
        if not hasattr(holder, attr):
            gone.append(name)
    for ctype in ("git_merge_file_options *", "git_merge_file_result *"):
        try:
            ffi.new(ctype)
        except Exception:  # cffi raises its own error types for an unknown C type
            gone.append(f"ffi.new({ctype!r})")
    return gone


class Handle(pygit2.Repository):
    """A repository handle freed as soon as nothing uses it (see the module docstring)."""

    def _common_init(self) -> None:
        super()._common_init()
        me = weakref.proxy(self)
        self.branches = Branches(me)
        self.references = References(me)
        self.remotes = RemoteCollection(me)
        self.submodules = SubmoduleCollection(me)


class FileMerge(NamedTuple):
    automergeable: bool
    contents: bytes
    mode: int


_FAVOR = {
    "fail": C.GIT_MERGE_FILE_FAVOR_NORMAL,
    "ours": C.GIT_MERGE_FILE_FAVOR_OURS,
    "theirs": C.GIT_MERGE_FILE_FAVOR_THEIRS,
    "union": C.GIT_MERGE_FILE_FAVOR_UNION,
}


def merge_file(
    repo: pygit2.Repository,
    path: str,
    ancestor: tuple[str, int] | None,
    ours: tuple[str, int],
    theirs: tuple[str, int],
    favor: Favor,
    diff3: bool,
    marker_size: int = 0,
) -> FileMerge:
    """libgit2's three-way merge of the blobs (id, mode) of one path: with `favor`,
    and diff3-style conflict markers (the ancestor's lines too) when `diff3`;
    markers `marker_size` long (0: git's 7)."""
    opts = ffi.new("git_merge_file_options *")
    opts.version = 1  # zero-filled by cffi: default labels
    opts.marker_size = marker_size
    opts.favor = _FAVOR[favor]
    opts.flags = C.GIT_MERGE_FILE_STYLE_DIFF3 if diff3 else C.GIT_MERGE_FILE_STYLE_MERGE
    keep = []

    def entry(side: tuple[str, int] | None) -> object:
        if side is None:
            return ffi.NULL
        mode = pygit2.enums.FileMode(side[1])
        centry, ref = pygit2.IndexEntry(path, pygit2.Oid(hex=side[0]), mode)._to_c()
        keep.append(ref)
        return centry

    result = ffi.new("git_merge_file_result *")
    err = C.git_merge_file_from_index(
        result, repo._repo, entry(ancestor), entry(ours), entry(theirs), opts
    )
    check_error(err)
    try:
        contents = bytes(ffi.buffer(result.ptr, result.len)) if result.ptr != ffi.NULL else b""
        return FileMerge(bool(result.automergeable), contents, int(result.mode))
    finally:
        C.git_merge_file_result_free(result)
