"""Merges with a favor ("ours", "theirs", "union") exactly as git makes them.

git's default merge (ort) diffs with histogram; libgit2, which Corral uses
for strategy "fail", has only Myers, and the two place some hunks
differently, so a favored merge taken from libgit2 differs from
`git merge -X ours|theirs` or a `merge=union` attribute on real code. The
files both sides changed are therefore merged by git itself: one running
`git merge-tree --write-tree --stdin` (`_scratch.MergeTree`) merges three
commits made of just those files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pygit2.enums import ObjectType

from ._effects import MergeStrategy
from ._errors import MergeError
from ._scratch import merge_tree, tree_bytes
from ._trace import Trace

__all__ = ["Sides", "favored_merge"]

_Side = tuple[str, int]
Sides = tuple[str, _Side | None, _Side, _Side]
"""(path, ancestor, ours, theirs): a file both sides changed; (blob id, mode) each."""

_BINARY_PROBE = 8000
"""git treats a file as binary when its first 8000 bytes hold a NUL."""


def favored_merge(
    trace: Trace, files: Sequence[Sides], strategy: MergeStrategy
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

    One merge by a running `git merge-tree --write-tree --stdin` (see
    `_scratch.MergeTree`) of three commits made of just these files (flat
    names, so no renames are found among them). "union" sets the
    `merge=union` attribute; for "ours"/"theirs" (git 2.39's merge-tree has no
    `-X`) the conflicts come back marked in merge style and each is replaced
    by the favored side, as xdiff's favor does after the same refinement.
    """
    texts = [x for f in files for x in f if x]
    marker = _MARKER_SIZE
    if strategy != "union" and any(m in x for x in texts for m in _MARKERS):
        longest = max(len(m[1]) for x in texts for m in _MARKER_RUN.finditer(x))
        marker = max(marker, longest + 7)
    attributes = "* merge=union\n" if strategy == "union" else \
        f"* merge=text conflict-marker-size={marker}\n"
    names = [f"{i:06d}" for i in range(len(files))]
    server = merge_tree(attributes)
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
            result, _ = server.merge(ours, theirs)
        except OSError as e:
            raise MergeError(f"git merge-tree failed: {e}", cause=e) from e
        kind, raw = git.read(result)
        assert kind == ObjectType.TREE
        ids = {name.decode(): oid.hex() for _, name, oid in _TREE_ENTRY.findall(raw)}
        merged = [git.read(ids[n])[1] for n in names]
    if strategy == "union":
        return merged
    return [_take_side(m, f[1], f[2], marker, strategy == "ours")
            for m, f in zip(merged, files, strict=True)]


_MARKERS = (b"<<<<<<<", b"=======", b">>>>>>>")
_MARKER_SIZE = 32
"""Conflict markers this long never occur in real files; a file with lines
starting with a run of markers as long gets longer ones (another git process)."""
_MARKER_RUN = re.compile(rb"^(<+|=+|>+)", re.M)
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
