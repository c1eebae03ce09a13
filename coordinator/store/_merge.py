"""Three-way merge of two scope heads, with cost that follows the change.

pygit2's `merge_trees` indexes the whole tree (~20 ms at 30k files); here the
merge works from the two diffs against the merge base instead: a path changed
on one side only is taken as it is, a path changed on both goes through a
three-way file merge. Conflicts come back as data.

Which file merge: git's own, for every strategy. libgit2 diffs with Myers;
git's default merge (ort) with histogram, and the two align repeated lines
differently: one finds two separate changes where the other finds one clash
(so "fail" verdicts differed), and a favor takes a different side of a
differently placed conflict (so "ours"/"theirs"/"union" texts differed). So
the text files both sides changed go, all in one run, through a running `git
merge-tree --write-tree` (`_favor.histogram_merge`): a merge that has such a
file costs that run (~1 ms), one that has none runs no git at all. Before any
line merge, `_favor.settle` settles what git settles by type, mode and the
merge driver ours' `.gitattributes` name. A favor settles file contents
only, as git's `-X` and `merge=union` do: modify/delete, rename/delete,
rename/rename and file/directory clashes conflict under every strategy.

Two tree shapes this merge does not model, git's directory renames and two
files renamed onto one name, are recognized from the two diffs and the whole
merge is handed to `git merge` (`_gitmerge`, whose doc says why not ort's
rules here); every other merge runs no such git process.
"""

from __future__ import annotations

import pygit2

from ..records._effects import MergeStrategy
from ..records._errors import MergeError
from ..records._merges import Conflict, ConflictKind, Hunk, MergeResult, Resolver
from . import _pygit2
from ._favor import (
    Side,
    TextMerge,
    Variant,
    histogram_merge,
    marker_size,
    merge_driver,
    parse_hunks,
    settle,
)
from ._gitdir import git_renames
from ._gitmerge import EMPTY_BLOB, git_merge, handed_to_git
from ._gitnames import entry
from ._pygit2 import FileMerge
from ._trace import Trace

__all__ = ["Conflict", "Hunk", "MergeResult", "Resolver", "merge_file", "merge_texts",
           "parse_hunks", "three_way"]

def merge_file(
    repo: pygit2.Repository,
    path: str,
    ancestor: tuple[str, int] | None,
    ours: tuple[str, int],
    theirs: tuple[str, int],
    strategy: MergeStrategy = "fail",
    *,
    diff3: bool | None = None,
    marker_size: int = 0,
) -> FileMerge:
    """libgit2's three-way file merge (Myers diff) with a favor: diff3-style
    markers for "fail" (the hunks carry the ancestor's lines; `diff3=False`
    gives merge style, git's default), merge style for a favor, as git's own
    drivers (diff3 style stops xdiff from trimming the lines both sides share
    at a conflict's edges before it takes a side). `marker_size` 0: git's 7."""
    return _pygit2.merge_file(repo, path, ancestor, ours, theirs, strategy,
                              diff3=strategy == "fail" if diff3 is None else diff3,
                              marker_size=marker_size)


class _Texts(pygit2.OdbBackend):
    """Objects in memory only: the three texts of one `merge_texts`."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, tuple[int, bytes]] = {}

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self.objects[str(oid)]

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        type_, data = self.objects[str(oid)]
        return type_, len(data)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return str(oid) in self.objects

    def write_cb(self, oid: pygit2.Oid, data: bytes, type_: int) -> None:
        self.objects[str(oid)] = (type_, data)

    def refresh_cb(self) -> None:
        pass


def merge_texts(ours: bytes, base: bytes, theirs: bytes) -> bytes | None:
    """`git merge-file -p ours base theirs` in process: the merged text, or None
    when it conflicts. Both are xdiff's merge with Myers diffs; git's level
    (ZEALOUS_ALNUM) only joins conflicts libgit2's (ZEALOUS) keeps apart, so the
    verdict and a clean text are the same (tests/coordinator/test_merge_texts.py).
    A process, three temp files and git's start cost ~3 ms; this, ~1 ms for
    100 KB texts."""
    odb = pygit2.Odb()
    odb.add_backend(_Texts(), 1)
    repo = pygit2.Repository()
    repo.set_odb(odb)
    ids = [(str(odb.write(pygit2.enums.ObjectType.BLOB, t)), 0o100644)
           for t in (base, ours, theirs)]
    merged = merge_file(repo, "file", ids[0], ids[1], ids[2])
    return merged.contents if merged.automergeable else None


def three_way(
    trace: Trace,
    base_commit: str,
    ours_commit: str,
    theirs_commit: str,
    strategy: MergeStrategy = "fail",
    resolver: Resolver | None = None,
    *,
    provenance: bool = True,
    only: frozenset[str] | None = None,
) -> MergeResult:
    """Merge `theirs_commit` into `ours_commit` over `base_commit`.

    Returns a MergeResult whose `tree` is None when a conflict remains (strategy
    "fail" and no resolver, or what git leaves conflicting under a favor:
    symlinks under "union", a file against a symlink or submodule, binary files
    under "union"). `only` restricts the content merge to some paths (the
    conflict guard's per-write check). Nothing is written but blobs and trees.
    """
    merge = _ThreeWay(trace, base_commit, ours_commit, theirs_commit, strategy, provenance, only)
    if only is None and handed_to_git(merge.base_t, merge.ours_t, trace.tree(merge.theirs_tree),
                                      merge.d_ours, merge.d_theirs):
        merge.by_git()
    else:
        merge.renames()
        merge.paths()
        merge.favored_texts()
    if resolver is not None:
        merge.resolve(resolver)
    return merge.result()


_Pending = tuple[str, TextMerge, Side | None, Side, Side, tuple[str, str]]
"""A favored text merge left for the one git run: (path, merge, ancestor,
ours, theirs, where each side wrote it)."""


class _ThreeWay:
    """One three-way merge: the trees, the two diffs against the base, and what
    the merge found so far (`changes` to our tree, `conflicts`)."""

    def __init__(self, trace: Trace, base_commit: str, ours_commit: str, theirs_commit: str,
                 strategy: MergeStrategy, provenance: bool, only: frozenset[str] | None) -> None:
        self.trace, self.strategy, self.provenance = trace, strategy, provenance
        self.base_commit, self.ours_commit, self.theirs_commit = (
            base_commit, ours_commit, theirs_commit)
        self.base_tree = trace.commit_tree(base_commit)
        self.ours_tree = trace.commit_tree(ours_commit)
        self.theirs_tree = trace.commit_tree(theirs_commit)
        self.d_ours = trace.diff_trees(self.base_tree, self.ours_tree)
        self.d_theirs = trace.diff_trees(self.base_tree, self.theirs_tree)
        if only is not None:
            self.d_theirs = {p: v for p, v in self.d_theirs.items() if p in only}
        self.base_t, self.ours_t = trace.tree(self.base_tree), trace.tree(self.ours_tree)
        self.changes: dict[str, Side | None] = {}
        self.conflicts: list[Conflict] = []
        self.pending: list[_Pending] = []
        self.done: set[str] = set()

    def conflict(self, path: str, kind: ConflictKind, anc: Side | None, o: Side | None,
                 t: Side | None, at: tuple[str, str] | None = None,
                 hunks: tuple[Hunk, ...] = ()) -> None:
        """Record a conflict at `path`; `at` is where our and their side last
        wrote it (default `path`: they differ across a rename)."""
        ours_at, theirs_at = at or (path, path)
        writer = self.trace.last_writer
        self.conflicts.append(Conflict(
            path=path, kind=kind, ancestor=anc[0] if anc else None,
            ours=o[0] if o else None, theirs=t[0] if t else None, hunks=hunks,
            ours_commit=writer(self.ours_commit, self.base_commit, ours_at)
            if self.provenance else None,
            theirs_commit=writer(self.theirs_commit, self.base_commit, theirs_at)
            if self.provenance else None,
        ))

    def take(self, path: str, merged: Side | None) -> None:
        """`merged` at `path`, unless our tree already holds it."""
        mine = self.d_ours[path] if path in self.d_ours else _side(self.ours_t, path)
        if merged != mine:
            self.changes[path] = merged
        else:
            self.changes.pop(path, None)

    def content(self, out: str, anc: Side | None, o: Side, t: Side,
                at: tuple[str, str]) -> None:
        """A file both sides changed, to `out`: settled as git settles it (see
        `_favor.settle`), or a text merge left for the one git run
        (`favored_texts`)."""
        driver = merge_driver(self.trace.repo, self.ours_commit, self.ours_t, out)
        settled = settle(anc, o, t, self.strategy, driver, self.trace.blob)
        if isinstance(settled, str):
            self.conflict(out, settled, anc, o, t, at)
        elif isinstance(settled, tuple):
            self.take(out, settled)
        else:
            self.pending.append((out, settled, anc, o, t, at))

    def merged_text(self, out: str, how: TextMerge, anc: Side | None, o: Side, t: Side,
                    at: tuple[str, str], data: bytes, conflicted: bool, marker: int) -> None:
        """A text merge's outcome at `out`: the merged file, or the conflict
        (with its hunks from `data`, diff3-marked), or a mode conflict."""
        if conflicted:
            kind: ConflictKind = "content" if anc is not None else "add/add"
            self.conflict(out, kind, anc, o, t, at, parse_hunks(data, marker))
        elif not how.mode_clean:
            self.conflict(out, "mode", anc, o, t, at)
        else:
            self.take(out, (self.trace.write_blob(data), how.mode))

    def favored_texts(self) -> None:
        """The text merges, all done by git, one run per variant (almost always
        one). A "fail" merge that conflicts runs again in diff3 style, for its
        hunks (their ancestor lines)."""
        variants: tuple[Variant, ...] = ("union", "ours", "theirs", "fail")
        for variant in variants:
            todo = [p for p in self.pending if p[1].variant == variant]
            if not todo:
                continue
            texts = [how.texts for _, how, *_ in todo]
            results = histogram_merge(texts, variant)
            clashes = [i for i, (_, conflicted) in enumerate(results) if conflicted]
            marked = dict(zip(clashes, histogram_merge([texts[i] for i in clashes], variant,
                                                       diff3=True), strict=True))
            marker = marker_size([texts[i] for i in clashes])
            for i, ((out, how, anc, o, t, at), (data, conflicted)) in enumerate(
                    zip(todo, results, strict=True)):
                data = marked[i][0] if conflicted else data
                self.merged_text(out, how, anc, o, t, at, data, conflicted, marker)

    def by_git(self) -> None:
        """The whole merge done by `git merge` (`_gitmerge`: directory renames,
        two renames onto one name)."""
        trees = (self.base_t, self.ours_t, self.trace.tree(self.theirs_tree))
        try:
            done = git_merge(self.trace, trees, self.ours_commit,
                             self.d_ours.keys() | self.d_theirs.keys(), self.strategy)
        except OSError as e:
            raise MergeError(f"git merge failed: {e}", cause=e) from e
        self.changes = done.changes
        for c in done.conflicts:
            at = (c.came_from or c.path, c.path) if c.ours else (c.path, c.came_from or c.path)
            self.conflict(c.path, c.kind, c.ancestor, c.ours, c.theirs, at, c.hunks)

    def renames(self) -> None:
        """A file one side renamed and the other edited in place: the edit
        follows the file to its new name, as in git (whose rename detection
        this uses). Under every strategy (a favor settles only contents):
        renamed on one side and deleted on the other, a conflict at the new
        name; renamed to two different names, a conflict at all three; renamed
        by both to one name, merged there. A rename onto a path the other side
        added is git's rename/add (`collision`)."""
        d_ours, d_theirs = self.d_ours, self.d_theirs
        ours_moves = _renames(self.trace, self.base_tree, self.ours_tree, d_ours, d_theirs)
        theirs_moves = _renames(self.trace, self.base_tree, self.theirs_tree, d_theirs, d_ours)
        for old in ours_moves.keys() & theirs_moves.keys():
            self.renamed_twice(old, ours_moves.pop(old), theirs_moves.pop(old))
        for old, new in ours_moves.items():
            o, t = d_ours[new], d_theirs[old]
            assert o is not None
            self.done.add(old)  # stays deleted: ours moved it
            if new in d_theirs:
                self.done.add(new)
                self.collision(old, new, "ours")
            elif t is not None:
                self.content(new, _side(self.base_t, old), o, t, (new, old))
            else:  # git's rename/delete
                self.conflict(new, "modify/delete", _side(self.base_t, old), o, None, (new, old))
        for old, new in theirs_moves.items():
            o, t = d_ours[old], d_theirs[new]
            assert t is not None
            self.done.update((old, new))
            if new in d_ours:
                self.collision(old, new, "theirs")
            elif o is not None:
                self.content(new, _side(self.base_t, old), o, t, (old, new))
                self.changes[old] = None
            else:  # git's rename/delete
                self.conflict(new, "modify/delete", _side(self.base_t, old), None, t, (old, new))

    def renamed_twice(self, old: str, new_o: str, new_t: str) -> None:
        """One file renamed by both sides: to one name, merged there over the
        old file (git's rename/rename(1to1)); to two names, git's rename/rename,
        a conflict at all three paths."""
        o, t = self.d_ours[new_o], self.d_theirs[new_t]
        self.done.update((old, new_t))
        anc = _side(self.base_t, old)
        if new_o == new_t:
            assert o is not None and t is not None
            if o != t:
                self.content(new_o, anc, o, t, (new_o, new_t))
            return
        for path, oo, tt in ((old, None, None), (new_o, o, None), (new_t, None, t)):
            self.conflict(path, "rename/rename", anc, oo, tt, (new_o, new_t))

    def collision(self, old: str, new: str, renamer: str) -> None:
        """`renamer` moved `old` to `new`, where the other side added a file:
        git's rename/add. Deleted on the other side: a conflict at `new`
        (git's rename/delete). Edited there: the rename's own merge first
        (the old file's two versions over the ancestor, with the strategy),
        then that result and the added file merged two ways at `new`; a first
        merge that conflicts leaves `new` conflicting. Where both sides wrote
        the same entry at `new`, git has matched the two before it looks at
        renames and keeps what stands at ours' stage: the rename's merge when
        ours renamed, ours' file when theirs did."""
        anc = _side(self.base_t, old)
        moved, added = (self.d_ours, self.d_theirs) if renamer == "ours" else \
            (self.d_theirs, self.d_ours)
        kept, there, mine = added[old], added[new], moved[new]
        assert mine is not None and there is not None
        o, t = (mine, there) if renamer == "ours" else (there, mine)
        if kept is None:
            self.conflict(new, "modify/delete", anc, o if renamer == "ours" else None,
                          t if renamer == "theirs" else None, (new, new))
            return
        if renamer == "theirs":
            self.changes[old] = None
            if mine == there:  # git matched the two sides at `new` first: ours stays
                return
        first = self.merged_now(new, anc, *((mine, kept) if renamer == "ours" else (kept, mine)))
        if first is None:
            self.conflict(new, "add/add", anc, o, t, (new, new))
        elif mine == there:  # matched first: the rename's merge is taken whole
            self.take(new, first)
        elif renamer == "ours":
            self.content(new, None, first, there, (new, new))
        else:
            self.content(new, None, there, first, (new, new))

    def merged_now(self, path: str, anc: Side | None, o: Side, t: Side) -> Side | None:
        """The clean merge of one file, done at once (None: a conflict)."""
        driver = merge_driver(self.trace.repo, self.ours_commit, self.ours_t, path)
        settled = settle(anc, o, t, self.strategy, driver, self.trace.blob)
        if isinstance(settled, str):
            return None
        if isinstance(settled, tuple):
            return settled
        [(data, conflicted)] = histogram_merge([settled.texts], settled.variant)
        if conflicted or not settled.mode_clean:
            return None
        return self.trace.write_blob(data), settled.mode

    def paths(self) -> None:
        """Every other path their side changed."""
        for path, t in sorted(self.d_theirs.items()):
            if path in self.done:
                continue
            if path not in self.d_ours:
                if t is not None and _blocked_by_file_or_dir(self.ours_t, path):
                    self.conflict(path, "file/directory", _side(self.base_t, path),
                                  _side(self.ours_t, path), t)
                else:
                    self.changes[path] = t
                continue
            o = self.d_ours[path]
            if o == t:
                continue
            if o is not None and t is not None:
                self.content(path, _side(self.base_t, path), o, t, (path, path))
            else:  # a favor settles only file contents: git's -X leaves this
                self.conflict(path, "modify/delete", _side(self.base_t, path), o, t)

    def resolve(self, resolver: Resolver) -> None:
        """Each conflict through `resolver`; those it cannot settle remain."""
        unresolved = []
        for c in self.conflicts:
            blob = self.trace.blob
            contents = [blob(b) if b else None for b in (c.ancestor, c.ours, c.theirs)]
            resolved = resolver(c, *contents)
            if resolved is None and c.ours is None and c.theirs is None:
                unresolved.append(c)
                continue
            mode = (_side(self.ours_t, c.path) or (None, 0o100644))[1]
            self.changes[c.path] = (
                (self.trace.write_blob(resolved), mode) if resolved is not None else None)
        self.conflicts = unresolved

    def result(self) -> MergeResult:
        if self.conflicts:
            return MergeResult(base=self.base_commit, tree=None,
                               conflicts=tuple(self.conflicts), changes=self.changes)
        tree = (self.trace.build_tree(self.ours_tree, self.changes)
                if self.changes else self.ours_tree)
        return MergeResult(base=self.base_commit, tree=tree, changes=self.changes)


def _side(tree: pygit2.Tree, path: str) -> Side | None:
    """(blob id, mode) of the file at `path`; None for none (or a directory)."""
    e = entry(tree, path)
    if e is None:
        return None
    return (str(e.id), e.filemode) if e.filemode != 0o040000 else None


def _renames(
    trace: Trace,
    base_tree: str,
    side_tree: str,
    d_side: dict[str, tuple[str, int] | None],
    d_other: dict[str, tuple[str, int] | None],
) -> dict[str, str]:
    """Files `side` renamed (old path -> new path) that the other side changed
    (edited or deleted) at the old path. Looked for only when there is such a
    file, so a merge without one pays nothing; found by git's own rename
    detection (`git diff-tree -M`, the diffcore its merge uses: 50 % similar);
    libgit2's scores similarity differently near that threshold. Empty files are never renamed
    (git's merge sets `rename_empty` off).

    Renames pair files deleted with files added, nothing else, so the
    detection runs on two small trees holding just those (cost follows the
    change, not the ~20 ms of a whole-tree diff at 16k files)."""
    candidates = {p for p, v in d_side.items() if v is None and p in d_other}
    if not candidates or not any(v is not None for v in d_side.values()):
        return {}
    base = trace.tree(base_tree)
    gone: dict[str, tuple[str, int] | None] = {}
    for p, v in d_side.items():
        if v is None and (was := _side(base, p)) is not None and was[0] != EMPTY_BLOB:
            gone[p] = was
    added = {p: v for p, v in d_side.items()
             if v is not None and v[0] != EMPTY_BLOB and _side(base, p) is None}
    pairs = git_renames({p: trace.blob(v[0]) for p, v in gone.items() if v},
                        {p: trace.blob(v[0]) for p, v in added.items()})
    return {old: new for old, new in pairs if old in candidates}


def _blocked_by_file_or_dir(ours: pygit2.Tree, path: str) -> bool:
    """True when adding file `path` would clobber our file at a parent path, or
    our directory at `path` (a file/directory conflict)."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        try:
            if ours["/".join(parts[:i])].filemode != 0o040000:
                return True
        except KeyError:
            return False
    try:
        return ours[path].filemode == 0o040000
    except KeyError:
        return False
