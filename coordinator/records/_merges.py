"""What a merge did: the merged tree or the conflicts, as data (the store's `three_way`
makes them; the API's wire records and the dashboard read them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Conflict", "ConflictKind", "Hunk", "MergeResult", "Resolver"]

ConflictKind = Literal[
    "content", "modify/delete", "add/add", "file/directory", "binary", "rename/rename",
    "distinct types", "symlink", "submodule", "mode",
]
"""What kind of clash; the last four as git names them: a file against a
symlink or submodule, two symlink targets, two submodule commits, two modes."""



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
