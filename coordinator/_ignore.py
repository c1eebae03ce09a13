"""Which paths the trace does not put in its trees: those matched by the
repository's .gitignore files. Their content is still recorded, beside the
tree: in the effect that wrote them (`ignored_files`) and in a per-scope tree
of them (`Trace.ignored_files`), so nothing acknowledged is lost over a restart."""

from __future__ import annotations

from functools import lru_cache

import pathspec
import pygit2

__all__ = ["IgnoreRules"]


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
