"""Three-way merge of two scope heads, with cost that follows the change.

pygit2's `merge_trees` indexes the whole tree (~20 ms at 30k files); here the
merge works from the two diffs against the merge base instead: a path changed
on one side only is taken as it is, a path changed on both goes through a
three-way file merge. Conflicts come back as data.

Which file merge: with strategy "fail", libgit2's (in process, diff3 markers
parsed into hunks); its clean/conflict verdicts agree with git's. With a
favor ("ours", "theirs", "union") the merged text is the answer, and libgit2
cannot give git's: it diffs with Myers where git's default merge (ort) uses
histogram, which places some hunks differently. So those files go, all in one
run, through `git merge-tree --write-tree` itself (`_histogram_merge`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pygit2
from pygit2 import C, ffi
from pygit2.enums import ObjectType
from pygit2.errors import check_error

from ._effects import MergeStrategy
from ._errors import MergeError
from ._scratch import GitDir, tree_bytes
from ._trace import Trace

__all__ = ["Conflict", "Hunk", "MergeResult", "Resolver", "merge_file", "three_way"]

ConflictKind = Literal[
    "content", "modify/delete", "add/add", "file/directory", "binary", "rename/rename"
]

_FAVOR = {
    "fail": C.GIT_MERGE_FILE_FAVOR_NORMAL,
    "ours": C.GIT_MERGE_FILE_FAVOR_OURS,
    "theirs": C.GIT_MERGE_FILE_FAVOR_THEIRS,
    "union": C.GIT_MERGE_FILE_FAVOR_UNION,
}


@dataclass(frozen=True, slots=True)
class Hunk:
    """One conflicting region: the ancestor's, our and their lines."""

    ours_start: int
    """1-based line in our version of the file where the region starts."""
    ours: tuple[str, ...]
    base: tuple[str, ...]
    theirs: tuple[str, ...]

    @property
    def ours_end(self) -> int:
        return self.ours_start + max(len(self.ours), 1) - 1


@dataclass(frozen=True, slots=True)
class Conflict:
    """A path both sides changed in ways that do not combine."""

    path: str
    kind: ConflictKind
    ancestor: str | None
    """Blob ids of the three versions (None where the file does not exist)."""
    ours: str | None
    theirs: str | None
    hunks: tuple[Hunk, ...] = ()
    ours_commit: str | None = None
    """The effect commit on our side that last wrote this path."""
    theirs_commit: str | None = None


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge did (or, dry-run, would do)."""

    base: str
    """The merge base commit."""
    tree: str | None
    """The merged tree; None when a conflict stopped the merge."""
    conflicts: tuple[Conflict, ...] = ()
    changes: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    """What the merge changes relative to our head's tree."""
    commit: str | None = None
    """The merge commit, when one was made."""
    dry_run: bool = False

    @property
    def clean(self) -> bool:
        return not self.conflicts


Resolver = Callable[[Conflict, bytes | None, bytes | None, bytes | None], bytes | None]
"""Called for each conflict with (conflict, ancestor, ours, theirs) contents;
returns the resolved content, or None to delete the path."""


class _FileMerge:
    __slots__ = ("automergeable", "contents", "mode")

    def __init__(self, automergeable: bool, contents: bytes, mode: int) -> None:
        self.automergeable = automergeable
        self.contents = contents
        self.mode = mode


def merge_file(
    repo: pygit2.Repository,
    path: str,
    ancestor: tuple[str, int] | None,
    ours: tuple[str, int],
    theirs: tuple[str, int],
    strategy: MergeStrategy = "fail",
) -> _FileMerge:
    """libgit2's three-way file merge (Myers diff) with a favor: diff3-style
    markers for "fail" (the hunks carry the ancestor's lines), merge style for
    a favor, as git's own drivers (diff3 style stops xdiff from trimming the
    lines both sides share at a conflict's edges before it takes a side).
    pygit2's binding exposes neither option, so this calls it through cffi."""
    opts = ffi.new("git_merge_file_options *")
    opts.version = 1  # zero-filled by cffi: default labels and marker size
    opts.favor = _FAVOR[strategy]
    opts.flags = (
        C.GIT_MERGE_FILE_STYLE_DIFF3 if strategy == "fail" else C.GIT_MERGE_FILE_STYLE_MERGE
    )
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
        return _FileMerge(bool(result.automergeable), contents, int(result.mode))
    finally:
        C.git_merge_file_result_free(result)


def parse_hunks(merged: bytes) -> tuple[Hunk, ...]:
    """Conflict regions from diff3-style marker text, with our line numbers."""
    hunks: list[Hunk] = []
    ours_line = 1
    state = "text"
    ours: list[str] = []
    base: list[str] = []
    theirs: list[str] = []
    start = 1
    for raw in merged.decode("utf-8", "replace").splitlines():
        if state == "text":
            if raw.startswith("<<<<<<<"):
                state, start, ours, base, theirs = "ours", ours_line, [], [], []
            else:
                ours_line += 1
        elif state == "ours":
            if raw.startswith("|||||||"):
                state = "base"
            elif raw.startswith("======="):
                state = "theirs"
            else:
                ours.append(raw)
        elif state == "base":
            if raw.startswith("======="):
                state = "theirs"
            else:
                base.append(raw)
        elif state == "theirs":
            if raw.startswith(">>>>>>>"):
                hunks.append(Hunk(start, tuple(ours), tuple(base), tuple(theirs)))
                ours_line += len(ours)
                state = "text"
            else:
                theirs.append(raw)
    return tuple(hunks)


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
    "fail" and no resolver). `only` restricts the content merge to some paths
    (the conflict guard's per-write check). Nothing is written but blobs and trees.
    """
    repo = trace.repo
    base_tree = str(trace.commit(base_commit).tree_id)
    ours_tree = str(trace.commit(ours_commit).tree_id)
    theirs_tree = str(trace.commit(theirs_commit).tree_id)
    d_ours = trace.diff_trees(base_tree, ours_tree)
    d_theirs = trace.diff_trees(base_tree, theirs_tree)
    if only is not None:
        d_theirs = {p: v for p, v in d_theirs.items() if p in only}
    base_t, ours_t = trace.tree(base_tree), trace.tree(ours_tree)
    changes: dict[str, tuple[str, int] | None] = {}
    conflicts: list[Conflict] = []
    favored: list[_Sides] = []

    def side(tree: pygit2.Tree, path: str) -> tuple[str, int] | None:
        try:
            e = tree[path]
        except KeyError:
            return None
        return (str(e.id), e.filemode) if e.filemode != 0o040000 else None

    def conflict(path: str, kind: ConflictKind, o: object, t: object, hunks=()) -> Conflict:
        anc = side(base_t, path)
        return Conflict(
            path=path,
            kind=kind,
            ancestor=anc[0] if anc else None,
            ours=o[0] if isinstance(o, tuple) else None,
            theirs=t[0] if isinstance(t, tuple) else None,
            hunks=tuple(hunks),
            ours_commit=trace.last_writer(ours_commit, base_commit, path) if provenance else None,
            theirs_commit=(
                trace.last_writer(theirs_commit, base_commit, path) if provenance else None
            ),
        )

    def content(out: str, anc: tuple[str, int] | None, o: tuple[str, int],
                t: tuple[str, int], paths: tuple[str, str, str]) -> Conflict | None:
        """Three-way merge of file contents into `changes[out]`, or the conflict.
        `paths` are where base, ours and theirs hold it (they differ across a rename)."""
        if strategy != "fail":
            favored.append((out, anc, o, t))  # all merged at the end, in one git run
            return None
        merged = merge_file(repo, out, anc, o, t, strategy)
        if merged.automergeable:
            changes[out] = (trace.write_blob(merged.contents), merged.mode or o[1])
            mine = d_ours[out] if out in d_ours else side(ours_t, out)
            if changes[out] == mine:
                del changes[out]  # already so in our tree
            return None
        kind: ConflictKind = "content" if anc is not None else "add/add"
        hunks = parse_hunks(merged.contents)
        if not hunks and not merged.contents:
            kind = "binary"
        return Conflict(
            path=out, kind=kind, ancestor=anc[0] if anc else None, ours=o[0], theirs=t[0],
            hunks=hunks,
            ours_commit=trace.last_writer(ours_commit, base_commit, paths[1])
            if provenance else None,
            theirs_commit=trace.last_writer(theirs_commit, base_commit, paths[2])
            if provenance else None,
        )

    def renamed_deleted(new: str, old: str, o: tuple[str, int] | None,
                        t: tuple[str, int] | None) -> Conflict:
        anc = side(base_t, old)
        return Conflict(
            path=new, kind="modify/delete", ancestor=anc[0] if anc else None,
            ours=o[0] if o else None, theirs=t[0] if t else None,
            ours_commit=trace.last_writer(ours_commit, base_commit, new if o else old)
            if provenance else None,
            theirs_commit=trace.last_writer(theirs_commit, base_commit, new if t else old)
            if provenance else None,
        )

    # A file one side renamed and the other edited in place: the edit follows
    # the file to its new name, as in git (whose rename detection this uses).
    # A file one side renamed and the other deleted is a conflict at the new name;
    # renamed to two different names, a conflict at all three.
    done: set[str] = set()
    ours_moves = _renames(trace, base_tree, ours_tree, d_ours, d_theirs)
    theirs_moves = _renames(trace, base_tree, theirs_tree, d_theirs, d_ours)
    for old in ours_moves.keys() & theirs_moves.keys():
        new_o, new_t = ours_moves.pop(old), theirs_moves.pop(old)
        o, t = d_ours[new_o], d_theirs[new_t]
        done.update((old, new_t))
        if strategy == "fail":
            anc = side(base_t, old)
            for path, oo, tt in ((old, None, None), (new_o, o, None), (new_t, None, t)):
                conflicts.append(Conflict(
                    path=path, kind="rename/rename", ancestor=anc[0] if anc else None,
                    ours=oo[0] if oo else None, theirs=tt[0] if tt else None,
                    ours_commit=trace.last_writer(ours_commit, base_commit, new_o)
                    if provenance else None,
                    theirs_commit=trace.last_writer(theirs_commit, base_commit, new_t)
                    if provenance else None,
                ))
        elif strategy == "theirs":
            changes[new_o], changes[new_t] = None, t
        elif strategy == "union":
            changes[new_t] = t
    for old, new in ours_moves.items():
        o, t = d_ours[new], d_theirs[old]
        assert o is not None
        done.add(old)  # stays deleted: ours moved it
        if t is None:
            if strategy == "fail":
                conflicts.append(renamed_deleted(new, old, o, None))
            elif strategy == "theirs":
                changes[new] = None
        elif (c := content(new, side(base_t, old), o, t, (old, new, old))) is not None:
            conflicts.append(c)
    for old, new in theirs_moves.items():
        o, t = d_ours[old], d_theirs[new]
        assert t is not None
        done.update((old, new))
        if o is None:
            if strategy == "fail":
                conflicts.append(renamed_deleted(new, old, None, t))
            elif strategy in ("theirs", "union"):
                changes[new] = t
        elif (c := content(new, side(base_t, old), o, t, (old, old, new))) is not None:
            conflicts.append(c)
        else:
            changes[old] = None

    for path, t in sorted(d_theirs.items()):
        if path in done:
            continue
        if path not in d_ours:
            if t is not None and _blocked_by_file_or_dir(ours_t, path):
                conflicts.append(conflict(path, "file/directory", side(ours_t, path), t))
                continue
            changes[path] = t
            continue
        o = d_ours[path]
        if o == t:
            continue
        if o is None or t is None:
            pick = {"ours": o, "theirs": t, "union": o if o is not None else t}.get(strategy)
            if strategy == "fail":
                conflicts.append(conflict(path, "modify/delete", o, t))
            elif pick != o:
                changes[path] = pick
            continue
        if (c := content(path, side(base_t, path), o, t, (path, path, path))) is not None:
            conflicts.append(c)

    for (out, *_), merged in zip(favored, favored_merge(trace, favored, strategy), strict=True):
        mine = d_ours[out] if out in d_ours else side(ours_t, out)
        if merged != mine:  # else already so in our tree
            changes[out] = merged

    if conflicts and resolver is not None:
        unresolved = []
        for c in conflicts:
            contents = [trace.blob(b) if b else None for b in (c.ancestor, c.ours, c.theirs)]
            resolved = resolver(c, *contents)
            if resolved is None and c.ours is None and c.theirs is None:
                unresolved.append(c)
                continue
            mode = (side(ours_t, c.path) or (None, 0o100644))[1]
            changes[c.path] = (trace.write_blob(resolved), mode) if resolved is not None else None
        conflicts = unresolved

    if conflicts:
        return MergeResult(base=base_commit, tree=None, conflicts=tuple(conflicts), changes=changes)
    tree = trace.build_tree(ours_tree, changes) if changes else ours_tree
    return MergeResult(base=base_commit, tree=tree, changes=changes)


_Side = tuple[str, int]
_Sides = tuple[str, _Side | None, _Side, _Side]
"""(path, ancestor, ours, theirs): a file both sides changed; (blob id, mode) each."""

_BINARY_PROBE = 8000
"""git treats a file as binary when its first 8000 bytes hold a NUL."""


def favored_merge(
    trace: Trace, files: Sequence[_Sides], strategy: MergeStrategy
) -> list[_Side]:
    """The merged (blob id, mode) of each file both sides changed, as
    `git merge -X ours|theirs` or a `merge=union` attribute gives it.

    Trivial cases and what git does not merge line by line (binary files,
    symlinks) are settled here; the text files go through `_histogram_merge`.
    Modes merge as in git's ort: theirs unless only ours changed it.
    """
    pick_ours = strategy in ("ours", "union")
    out: list[_Side | None] = []
    todo: list[tuple[int, tuple[bytes | None, bytes, bytes], int]] = []
    for i, (_, anc, o, t) in enumerate(files):
        mode = t[1] if o[1] == t[1] or o[1] == (anc[1] if anc else 0) else o[1]
        if o[0] == t[0] or (anc is not None and t[0] == anc[0]):
            out.append((o[0], mode))
            continue
        if anc is not None and o[0] == anc[0]:
            out.append((t[0], mode))
            continue
        if o[1] == 0o120000 or t[1] == 0o120000 or o[1] >> 12 != t[1] >> 12:
            out.append(o if pick_ours else t)
            continue
        texts = (trace.blob(anc[0]) if anc else None, trace.blob(o[0]), trace.blob(t[0]))
        if any(x is not None and b"\0" in x[:_BINARY_PROBE] for x in texts):
            out.append((o[0] if pick_ours else t[0], mode))
            continue
        out.append(None)
        todo.append((i, texts, mode))
    if todo:
        merged = _histogram_merge([texts for _, texts, _ in todo], strategy)
        for (i, _, mode), data in zip(todo, merged, strict=True):
            out[i] = (trace.write_blob(data), mode)
    return [x for x in out if x is not None]


def _histogram_merge(
    files: Sequence[tuple[bytes | None, bytes, bytes]], strategy: MergeStrategy
) -> list[bytes]:
    """Merge each (ancestor, ours, theirs) text as git's default merge does.

    One `git merge-tree --write-tree` over three commits made of just these
    files (flat names, so no renames are found among them). "union" sets the
    `merge=union` attribute; for "ours"/"theirs" (git 2.39's merge-tree has no
    `-X`) the conflicts come back marked in merge style and each is replaced
    by the favored side, as xdiff's favor does after the same refinement.
    """
    marker = 7 + max(
        (len(m[1]) for x in (y for f in files for y in f if y)
         for m in _MARKER_RUN.finditer(x)), default=0)
    attributes = "* merge=union\n" if strategy == "union" else \
        f"* merge=text conflict-marker-size={marker}\n"
    names = [f"{i:06d}" for i in range(len(files))]
    with GitDir(attributes) as git:
        def tree(k: int) -> str:
            entries = {}
            for n, f in zip(names, files, strict=True):
                data = f[k]
                if data is not None:
                    entries[n] = (git.blob(data), 0o100644)
            return git.write(ObjectType.TREE, tree_bytes(entries))

        base = git.commit(tree(0))
        ours, theirs = git.commit(tree(1), [base]), git.commit(tree(2), [base])
        done = git.run("merge-tree", "--write-tree", ours, theirs)
        if done.returncode not in (0, 1):
            raise MergeError(
                f"git merge-tree failed: {done.stderr.decode(errors='replace').strip()}")
        kind, raw = git.read(done.stdout.split(b"\n", 1)[0].decode())
        assert kind == ObjectType.TREE
        ids = {name.decode(): oid.hex() for _, name, oid in _TREE_ENTRY.findall(raw)}
        merged = [git.read(ids[n])[1] for n in names]
    if strategy == "union":
        return merged
    return [_take_side(m, f[1], f[2], marker, strategy == "ours")
            for m, f in zip(merged, files, strict=True)]


_MARKER_RUN = re.compile(rb"^(<+|=+|>+)", re.M)
_TREE_ENTRY = re.compile(rb"(\d+) ([^\0]*)\0(.{20})", re.S)


def _take_side(merged: bytes, ours: bytes, theirs: bytes, marker: int, take_ours: bool) -> bytes:
    """Merge-style conflict text with each conflict replaced by one side's lines.

    xdiff adds a line end to a side's last line inside the markers when the
    file has none; a conflict that ends the file is given back without it.
    """
    start, mid, end = b"<" * marker, b"=" * marker, b">" * marker
    out: list[bytes] = []
    side: list[bytes] = []
    state = 0  # 0 outside, 1 in ours, 2 in theirs
    lines = merged.splitlines(keepends=True)
    for n, line in enumerate(lines):
        bare = line.rstrip(b"\r\n")
        if state == 0 and line.startswith(start) and (len(bare) == marker or bare[marker:
                                                                              marker + 1] == b" "):
            state, side = 1, []
        elif state == 1 and bare == mid:
            state = 2
        elif state == 2 and line.startswith(end) and (len(bare) == marker or bare[marker:
                                                                              marker + 1] == b" "):
            source = ours if take_ours else theirs
            if n == len(lines) - 1 and side and not source.endswith(b"\n"):
                tail = source.rsplit(b"\n", 1)[-1]
                side[-1] = side[-1][: len(tail)]
            out.extend(side)
            state = 0
        elif state == 0:
            out.append(line)
        elif (state == 1) == take_ours:
            side.append(line)
    return b"".join(out)


def _renames(
    trace: Trace,
    base_tree: str,
    side_tree: str,
    d_side: dict[str, tuple[str, int] | None],
    d_other: dict[str, tuple[str, int] | None],
) -> dict[str, str]:
    """Files `side` renamed (old path -> new path) that the other side changed
    (edited or deleted) at the old path and did not touch at the new one. Looked
    for only when there is such a file, so a merge without one pays nothing;
    found with libgit2's rename detection (git's default: 50 % similar)."""
    candidates = {p for p, v in d_side.items() if v is None and p in d_other}
    if not candidates or not any(v is not None and p not in d_other for p, v in d_side.items()):
        return {}
    diff = trace.tree(base_tree).diff_to_tree(trace.tree(side_tree))
    diff.find_similar(flags=pygit2.enums.DiffFind.FIND_RENAMES)
    out: dict[str, str] = {}
    for delta in diff.deltas:
        old, new = delta.old_file.path, delta.new_file.path
        if delta.status_char() == "R" and old in candidates and new not in d_other:
            out[old] = new
    return out


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
