"""Which paths the trace does not put in its trees: those matched by the
repository's .gitignore files. Their content is still recorded, beside the
tree: in the effect that wrote them (`ignored_files`) and in a per-scope tree
of them (`Trace.ignored_files`), so nothing acknowledged is lost over a restart."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import pathspec
import pygit2
from pydantic import TypeAdapter

from ._effects import FileChange

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = ["IgnoreRules", "load_ignored", "store_ignored"]


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


_IGNORED = TypeAdapter(list[FileChange])


def store_ignored(trace: Trace, changes: Sequence[FileChange]) -> str | None:
    """The blob an outcome's `ignored_files` names (None when there are none)."""
    return trace.write_blob(_IGNORED.dump_json(list(changes))) if changes else None


def load_ignored(trace: Trace, blob: str | None) -> list[FileChange]:
    """The changes an outcome's `ignored_files` blob lists."""
    return _IGNORED.validate_json(trace.blob(blob)) if blob else []
