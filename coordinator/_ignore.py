"""Which paths the trace does not put in its trees: those matched by the
repository's .gitignore files. Their content is still recorded, beside the
tree, in the effect that wrote them (`ignored_files`), so nothing
acknowledged is lost over a restart."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import pathspec
import pygit2

from ._effects import FileChange, ScopeRewind

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = ["IgnoreRules", "ignored_state"]


@lru_cache(maxsize=256)
def _spec(text: bytes) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(text.decode("utf-8", "replace").splitlines())


class IgnoreRules:
    """The .gitignore rules of one tree, looked up lazily along each path.

    Only the .gitignore files on a path's way down are read (cost follows the
    path depth, not the repository), as git does for a single path.
    """

    def __init__(self, repo: pygit2.Repository, tree: pygit2.Tree) -> None:
        self._repo = repo
        self._tree = tree

    def _rules(self, directory: str) -> pathspec.PathSpec | None:
        try:
            obj = self._tree[f"{directory}/.gitignore" if directory else ".gitignore"]
        except KeyError:
            return None
        if obj.type != pygit2.enums.ObjectType.BLOB:
            return None
        return _spec(obj.read_raw())

    def ignored(self, path: str) -> bool:
        """True when git would ignore `path` (a file) given this tree's .gitignore files."""
        parts = path.split("/")
        verdict = False
        for depth in range(len(parts)):
            directory = "/".join(parts[:depth])
            spec = self._rules(directory)
            if spec is None:
                continue
            # GitIgnoreSpec applies directory patterns ("build/") to the files
            # below them; a deeper .gitignore overrides a shallower one.
            result = spec.check_file("/".join(parts[depth:]))
            if result.include is not None:
                verdict = bool(result.include)
        return verdict


def ignored_state(trace: Trace, head: str, stop: str) -> dict[str, FileChange]:
    """The ignored files a workspace at `head` holds, from the trace alone: what
    a restart puts back beside the tree.

    Walks first parents from `head` down to `stop` (the snapshot): the newest
    materialized effect that wrote or deleted an ignored path decides it, and a
    rewind drops the ignored paths written by the effects it rewound (as
    `Scope.rewind` does in the live workspace). Forks follow into the parent's
    history, so a child holds what its parent held when it forked. Only records
    that mention ignored files or a rewind are decoded.
    """
    decided: dict[str, FileChange | None] = {}
    commit = trace.commit(head)
    stop_oid = pygit2.Oid(hex=stop)
    while commit.id != stop_oid:
        message = commit.message
        if '"ignored_files":[{' in message or '"kind":"scope.rewind"' in message:
            effect = trace.entry_of(commit).effect
            if effect is not None and effect.status == "materialized":
                intent, outcome = effect.intent, effect.outcome
                if isinstance(intent, ScopeRewind):
                    for path in trace.ignored_since(intent.head, intent.to):
                        decided.setdefault(path, None)
                for change in reversed(getattr(outcome, "ignored_files", ())):
                    decided.setdefault(change.path, change if change.blob else None)
        if not commit.parent_ids:
            break
        commit = commit.parents[0]
    return {path: change for path, change in decided.items() if change is not None}
