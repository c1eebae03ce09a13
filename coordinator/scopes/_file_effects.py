"""File effects: the intent of a patch, and the world action that writes a
file intent (write, patch, delete) into a workspace's backing tree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sandboxes import Change, apply_changes

from ..records._effects import FileChange, FsDelete, FsOutcome, FsPatch, FsWrite, Intent
from ..records._errors import CorralError, PatchError, SandboxFailure
from ..records._paths import resolve_in
from ..store._ignore import split_ignored, store_ignored
from ..store._patch import apply_patch, candidate_paths, trace_blobs, workspace_files
from ..store._trace import Trace, TreeChanges

__all__ = ["changes_of", "materialize", "patch_intent"]


def patch_intent(
    trace: Trace, backing: Path, writable: Callable[[str], str], raw: bytes, one_file: bool,
    three_way: bool,
) -> FsPatch:
    """The intent of patch `raw` on the workspace tree `backing`: every file it
    changes, as git apply leaves them (blobs written), each path checked by
    `writable`. Raises PatchError when it does not apply."""
    current = workspace_files(backing)
    files = apply_patch(raw, current, three_way=three_way, unidiff_zero=one_file,
                        blob=trace_blobs(trace))
    if not files:
        # git applied it and nothing changed (a three-way patch whose change is
        # already there): git accepts that, so it is an effect that changes nothing.
        for path in sorted(candidate_paths(raw)):
            found = current(path)
            if found is not None:
                return FsPatch(path=writable(path), diff=trace.write_blob(raw),
                               blob=trace.write_blob(found[0]), mode=found[1], changes=(),
                               three_way=three_way)
        raise PatchError("the patch changes nothing")
    changes = tuple(
        FileChange(path=writable(f.path),
                   blob=trace.write_blob(f.data) if f.data is not None else None,
                   mode=f.mode)
        for f in files
    )
    first = changes[0]
    return FsPatch(path=first.path, diff=trace.write_blob(raw), blob=first.blob,
                   mode=first.mode, changes=changes, three_way=three_way)


def changes_of(intent: Intent) -> list[FileChange]:
    """The file changes a file intent asks for, deletions first (a file may give
    way to a directory of the same name)."""
    match intent:
        case FsPatch() if intent.changes:
            # a rewrite may have replaced `path`'s content
            return sorted(
                (FileChange(path=c.path, blob=intent.blob, mode=intent.mode)
                 if c.path == intent.path else c for c in intent.changes),
                key=lambda c: c.blob is not None,
            )
        case FsWrite() | FsPatch():
            return [FileChange(path=intent.path, blob=intent.blob, mode=intent.mode)]
        case FsDelete():
            return [FileChange(path=intent.path, blob=None)]
    raise CorralError(f"not a file intent: {intent.kind}")


def materialize(
    trace: Trace, backing: Path, head: str, changes: Sequence[FileChange]
) -> tuple[FsOutcome, TreeChanges]:
    """Write `changes` into the workspace tree `backing` (at commit `head`); the
    tracked ones become tree changes, the ignored ones are kept beside the tree."""
    for c in changes:  # re-check: a symlink could have appeared since the proposal
        resolve_in(backing, c.path, follow_last=False)
    try:
        apply_changes(
            backing,
            [Change(c.path, trace.blob(c.blob) if c.blob else None, c.mode) for c in changes],
        )
    except OSError as e:
        raise SandboxFailure(f"could not write to the workspace: {e}", cause=e) from e
    tracked, ignored = split_ignored(trace, head, changes)
    outcome = FsOutcome(changes=tuple(tracked), ignored=tuple(c.path for c in ignored),
                        ignored_files=store_ignored(trace, ignored))
    return outcome, {c.path: (c.blob, c.mode) if c.blob else None for c in tracked}
