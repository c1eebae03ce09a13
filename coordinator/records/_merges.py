"""What a merge did: the merged tree or the conflicts, as data (the store's `three_way`
makes them; the API's wire records and the dashboard read them); what the merge of a
team's branches did (`TeamMerge`, made by `coordinator.control`'s `merge_team`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Conflict", "ConflictKind", "Hunk", "MergeResult", "Resolver", "TeamMerge"]

ConflictKind = Literal[
    "content", "modify/delete", "add/add", "file/directory", "binary", "rename/rename",
    "distinct types", "symlink", "submodule", "mode", "file location",
]
"""What kind of clash; the last five as git names them: a file against a
symlink or submodule, two symlink targets, two submodule commits, two modes,
and a file one side added (or moved) into a directory the other side renamed
(git moved it into the new directory; `path` is where it went)."""



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


@dataclass(frozen=True, slots=True)
class TeamMerge:
    """What the merge of several members' branches into one scope did (or, dry-run, would
    do), one member after another as `git merge` of each branch in turn would."""

    order: tuple[str, ...]
    """Every member's scope name, in the order of the fold (picked, with
    "fewest-conflicts"); members after `stopped` in the order they ranked when it stopped."""
    merges: tuple[MergeResult, ...]
    """One per member merged, in the fold's order: they are `order[:len(merges)]`."""
    tree: str
    """The tree the scope merged into holds after the fold (dry-run: would hold)."""
    stopped: str | None = None
    """The member whose merge conflicted and stopped the fold: nothing of it or of the
    members after it was merged; None when every member merged."""
    conflict: MergeResult | None = None
    """The stopping member's merge that did not merge: its `.conflicts`."""
    dry_run: bool = False

    @property
    def clean(self) -> bool:
        """Whether every member merged."""
        return self.stopped is None

    @property
    def merged(self) -> tuple[str, ...]:
        """The members merged, in order."""
        return self.order[:len(self.merges)]

    @property
    def unmerged(self) -> tuple[str, ...]:
        """The members not merged: `stopped` and the members after it."""
        return self.order[len(self.merges):]


Resolver = Callable[[Conflict, bytes | None, bytes | None, bytes | None], bytes | None]
"""Called for each conflict with (conflict, ancestor, ours, theirs) contents;
returns the resolved content, or None to delete the path."""
