"""One file both sides of a merge changed, settled as `git merge` (ort) settles it.

Types and modes first: a file on one side and a symlink or submodule on the
other is a conflict under every strategy, as are two different submodule
commits (Corral holds no submodule history to fast-forward through); two
symlinks take the favored side ("ours"/"theirs") or conflict ("fail",
"union"). Then the merge driver that ours' `.gitattributes` name for the path
(git reads the attributes of the tree it has checked out: ours): `-merge`,
`binary` and `merge=binary` never merge lines (a conflict, or the favored
side under "ours"/"theirs"); `merge=union` unions whatever the strategy.
Strategy "union" is git with `* merge=union` in `info/attributes`, which
outranks every in-tree line. Files with a NUL in their first 8000 bytes are
binary to every driver.

Text merges are git's own, for every strategy: git's default merge (ort)
diffs with histogram; libgit2 has only Myers, and the two place some hunks
differently. So those files go, all in one run, through one running `git
merge-tree --write-tree --stdin` (`_gitdir.MergeTree`) that merges three
commits made of just them: "union" with a `merge=union` attribute; "fail" as
it is (and again in diff3 style for a conflict's hunks); "ours"/"theirs" in
merge style with long markers, each conflict then replaced by the favored
side. That is what `-X ours|theirs` writes (git 2.39's merge-tree has no
`-X`): xdiff applies a favor only as it writes the result, to the conflicts
its refinement left (xmerge.c, `xdl_fill_merge_buffer`), and a favored side
gets no line end added where the file has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import pygit2
from pygit2.enums import AttrCheck, ObjectType

from ..records._effects import MergeStrategy
from ..records._errors import MergeError
from ..records._merges import Hunk
from ._gitdir import merge_tree, tree_bytes
from ._gitnames import entry

__all__ = ["Clash", "Driver", "Side", "TextMerge", "histogram_merge", "marker_size",
           "merge_driver", "parse_hunks", "settle"]

Side = tuple[str, int]
"""(blob id, mode) of one version of a path."""
Driver = Literal["text", "union", "binary"]
Variant = Literal["fail", "union", "ours", "theirs"]
Clash = Literal["distinct types", "symlink", "submodule", "mode", "binary"]
"""A conflict git finds before any line merge (the names are git's)."""

_BINARY_PROBE = 8000
"""git treats a file as binary when its first 8000 bytes hold a NUL."""
_LINK, _GITLINK = 0o120000, 0o160000
_ATTRIBUTES = AttrCheck.INDEX_ONLY | AttrCheck.NO_SYSTEM | AttrCheck.INCLUDE_COMMIT
"""Attributes from the commit's tree alone (Corral's trace has no work tree)."""


def merge_driver(repo: pygit2.Repository, commit: str, tree: pygit2.Tree, path: str) -> Driver:
    """The merge driver the `.gitattributes` files of `commit` (with root tree
    `tree`) give `path`. A driver name git does not build in is, without a
    `merge.<name>.driver` in the config (Corral's copy has none), text."""
    parts = path.split("/")
    for i in range(len(parts)):  # most paths have no .gitattributes above them
        if entry(tree, "/".join([*parts[:i], ".gitattributes"])) is not None:
            break
    else:
        return "text"
    value = repo.get_attr(path, "merge", _ATTRIBUTES, commit)
    if value is False or value == "binary":
        return "binary"
    return "union" if value == "union" else "text"


@dataclass(frozen=True, slots=True)
class TextMerge:
    """A line merge still to do: the texts' ancestor (None: merged two-way,
    as when the base held another type), the three texts (read once), the
    variant (git's favor), and the merged mode (`mode_clean` False: the modes
    conflict whatever the text)."""

    ancestor: Side | None
    texts: tuple[bytes | None, bytes, bytes]
    variant: Variant
    mode: int
    mode_clean: bool = True


def settle(
    anc: Side | None, ours: Side, theirs: Side, strategy: MergeStrategy, driver: Driver,
    blob: Callable[[str], bytes],
) -> Side | Clash | TextMerge:
    """What git makes of a path both sides changed (to different entries):
    the merged entry, a conflict kind, or the text merge to run."""
    o_mode, t_mode = ours[1], theirs[1]
    if o_mode >> 12 != t_mode >> 12:  # a file, a symlink, a submodule: git's "distinct types"
        return "distinct types"
    a_mode = anc[1] if anc is not None else 0
    if o_mode == t_mode or o_mode == a_mode:
        mode, mode_clean = t_mode, True
    else:
        mode, mode_clean = o_mode, t_mode == a_mode
    same = anc is not None and ours[0] == anc[0]
    if ours[0] == theirs[0] or (anc is not None and theirs[0] == anc[0]) or same:
        picked = (theirs[0] if same else ours[0], mode)
        return picked if mode_clean else "mode"
    if o_mode == _GITLINK:
        return "submodule"
    if o_mode == _LINK:  # git's favor, whatever the attributes say
        return _pick(strategy, ours, theirs, "symlink")
    if strategy == "union":  # `* merge=union` in info/attributes outranks the tree's
        driver = "union"
    variant: Variant = "union" if driver == "union" else strategy
    if driver == "binary":  # a side taken whole still carries the mode clash
        return _pick(variant, (ours[0], mode), (theirs[0], mode), "binary", mode_clean)
    two_way = anc is None or a_mode >> 12 != o_mode >> 12
    base_text = blob(anc[0]) if anc is not None and not two_way else None
    texts = (base_text, blob(ours[0]), blob(theirs[0]))
    if any(x is not None and b"\0" in x[:_BINARY_PROBE] for x in texts):
        # git's binary merge: the favored side, else a conflict (union has no favor)
        return _pick(variant, (ours[0], mode), (theirs[0], mode), "binary", mode_clean)
    return TextMerge(None if two_way else anc, texts, variant, mode, mode_clean)


def _pick(variant: MergeStrategy, ours: Side, theirs: Side, kind: Clash,
          mode_clean: bool = True) -> Side | Clash:
    """A side taken whole: git's favor, or a conflict (no favor, or union; or
    the favored side with modes that clash)."""
    if variant not in ("ours", "theirs"):
        return kind
    return (ours if variant == "ours" else theirs) if mode_clean else "mode"


def histogram_merge(
    files: Sequence[tuple[bytes | None, bytes, bytes]], variant: Variant, *, diff3: bool = False,
) -> list[tuple[bytes, bool]]:
    """Each (ancestor, ours, theirs) text merged as git's default merge does,
    with `variant` "union", "ours" or "theirs" (never a conflict) or "fail":
    (the merged text, whether it conflicts). A conflicted text is marked in
    merge style, or diff3 style with `diff3`, with markers of
    `marker_size(...)` of the texts."""
    if not files:
        return []
    return _histogram_merge(files, variant, diff3)


def _histogram_merge(
    files: Sequence[tuple[bytes | None, bytes, bytes]], strategy: Variant, diff3: bool,
) -> list[tuple[bytes, bool]]:
    """Merge each (ancestor, ours, theirs) text as git's default merge does.

    One merge by a running `git merge-tree --write-tree --stdin` (see
    `_gitdir.MergeTree`) of three commits made of just these files (flat
    names, so no renames are found among them). "union" sets the
    `merge=union` attribute; for "ours"/"theirs" (git 2.39's merge-tree has no
    `-X`) the conflicts come back marked in merge style and each is replaced
    by the favored side: xdiff applies a favor only when it writes the result,
    after the same conflict refinement (xmerge.c, `xdl_fill_merge_buffer`).
    """
    marker = marker_size(files)
    attributes = "* merge=union\n" if strategy == "union" else \
        f"* merge=text conflict-marker-size={marker}\n"
    config = "[merge]\n\tconflictStyle = diff3\n" if diff3 else ""
    names = [f"{i:06d}" for i in range(len(files))]
    server = merge_tree(attributes, config)
    with server.session() as git:
        def tree(k: int) -> str:
            entries = {}
            for n, f in zip(names, files, strict=True):
                data = f[k]
                if data is not None:
                    entries[n] = (git.blob(data), 0o100644)
            return git.write(ObjectType.TREE, tree_bytes(entries))

        base = git.commit(tree(0))
        ours, theirs = git.commit(tree(1), [base]), git.commit(tree(2), [base])
        try:
            result, conflicted = server.merge(ours, theirs)
        except OSError as e:
            raise MergeError(f"git merge-tree failed: {e}", cause=e) from e
        kind, raw = git.read(result)
        assert kind == ObjectType.TREE
        ids = {name.decode(): oid.hex() for _, name, oid in _TREE_ENTRY.findall(raw)}
        merged = [git.read(ids[n])[1] for n in names]
    if strategy in ("union", "fail"):
        return [(m, n in conflicted) for m, n in zip(merged, names, strict=True)]
    return [(_take_side(m, f[1], f[2], marker, strategy == "ours"), False)
            for m, f in zip(merged, files, strict=True)]


def marker_size(files: Sequence[tuple[bytes | None, bytes, bytes]]) -> int:
    """Conflict markers longer than any run of `<`, `=`, `|` or `>` that starts
    a line of these texts, so that a marker line is never a line of a file."""
    texts = [x for f in files for x in f if x]
    if not any(m in x for x in texts for m in _MARKERS):
        return _MARKER_SIZE
    longest = max((len(m[1]) for x in texts for m in _MARKER_RUN.finditer(x)), default=0)
    return max(_MARKER_SIZE, longest + 7)


def _lines(text: bytes) -> list[bytes]:
    """xdiff's lines: each up to and with its `\\n` (a lone CR is inside a
    line), the last maybe without."""
    lines = [line + b"\n" for line in text.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


_MARKERS = (b"<<<<<<<", b"=======", b">>>>>>>", b"|||||||")
_MARKER_SIZE = 32
"""Conflict markers this long never occur in real files; a file with lines
starting with a run of markers as long gets longer ones (another git process)."""
_MARKER_RUN = re.compile(rb"^(<+|=+|>+|\|+)", re.M)
_TREE_ENTRY = re.compile(rb"(\d+) ([^\0]*)\0(.{20})", re.S)


def _take_side(merged: bytes, ours: bytes, theirs: bytes, marker: int, take_ours: bool) -> bytes:
    """Merge-style conflict text with each conflict replaced by one side's lines.

    xdiff adds a line end to a side's last line inside the markers when the
    file has none; a conflict that ends the file is given back without it.
    """
    start, mid, end = b"<" * marker, b"=" * marker, b">" * marker
    if start not in merged:
        return merged
    out: list[bytes] = []
    side: list[bytes] = []
    state = 0  # 0 outside, 1 in ours, 2 in theirs
    lines = _lines(merged)
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


def parse_hunks(merged: bytes, marker: int = 7) -> tuple[Hunk, ...]:
    """Conflict regions from diff3-style marker text (markers `marker` long),
    with our line numbers."""
    start_, base_, mid_, end_ = ("<" * marker, "|" * marker, "=" * marker, ">" * marker)
    hunks: list[Hunk] = []
    ours_line = 1
    state = "text"
    ours: list[str] = []
    base: list[str] = []
    theirs: list[str] = []
    start = 1
    for raw in merged.decode("utf-8", "replace").splitlines():
        if state == "text":
            if raw.startswith(start_):
                state, start, ours, base, theirs = "ours", ours_line, [], [], []
            else:
                ours_line += 1
        elif state == "ours":
            if raw.startswith(base_):
                state = "base"
            elif raw.startswith(mid_):
                state = "theirs"
            else:
                ours.append(raw)
        elif state == "base":
            if raw.startswith(mid_):
                state = "theirs"
            else:
                base.append(raw)
        elif state == "theirs":
            if raw.startswith(end_):
                hunks.append(Hunk(start, tuple(ours), tuple(base), tuple(theirs)))
                ours_line += len(ours)
                state = "text"
            else:
                theirs.append(raw)
    return tuple(hunks)
